"""Measurement integrity of a region: what the interception library
(native/src/intercept/intercept_integrity.c) saw of each CUDA-event timing
taken inside it, and what auto-regions saw of the harness (a timing function
replaced after import). docs/integrity.md says what each flag means.

The tenant sends its counts with EXIT on the region channel
(`integrity=<windows>,<escaped>,<other_thread>,<empty>,<stream_mismatch>`,
from `krex_region_integrity` in libkrex.so, and `harness=<name>` once per
patched harness); the runtime attaches the record made here to the region's
certificate, and hands it back in RELEASED. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COUNTS = ("windows", "escaped", "other_thread", "empty", "stream_mismatch")
FLAGS = ("escaped", "other_thread", "empty", "stream_mismatch", "patched_harness")
REASONS = {
    "escaped": "work launched in the window on a stream the end event's stream never waited on "
               "(no event wait, no sync before the end record): it may run after the end event",
    "other_thread": "launches from another thread of the process during the window",
    "empty": "a timed window that holds no kernel or graph launch (the work was queued after the end record, "
             "or elsewhere)",
    "stream_mismatch": "the events were recorded on a stream no launch of the window used",
    "patched_harness": "the timing harness called is not the module's original (replaced after import)",
}
MAX_COUNT = 1 << 62
MAX_HARNESS_NAME = 48
MAX_HARNESSES = 4  # an EXIT line and its RELEASED reply stay within the channel's 256 bytes

# Harnesses auto-regions found replaced in this process (tenant/auto_region.py
# adds them; a replaced harness taints every region after it): the region
# client sends them with each EXIT, after running `release_checks` (each adds
# what it finds replaced now).
patched_harnesses: list[str] = []
release_checks: list[Callable[[], None]] = []


def note_patched(name: str) -> None:
    if name not in patched_harnesses:
        patched_harnesses.append(name)


def patched_now() -> list[str]:
    """The harnesses found replaced so far, the release checks run first."""
    for check in list(release_checks):
        try:
            check()
        except Exception:  # a check must never make a release fail
            pass
    return list(patched_harnesses)


def parse_counts(text: str) -> dict[str, int] | None:
    """`W,E,T,Z,M` as sent in EXIT; None when it is not that."""
    parts = text.split(",")
    if len(parts) != len(COUNTS) or not all(p.isascii() and p.isdigit() and len(p) <= 19 for p in parts):
        return None
    values = [min(int(p), MAX_COUNT) for p in parts]
    return dict(zip(COUNTS, values))


def parse_exit(arg: str) -> tuple[dict[str, int] | None, list[str]]:
    """The integrity words of an EXIT line: (counts or None, patched harness names)."""
    counts: dict[str, int] | None = None
    patched: list[str] = []
    for word in arg.split():
        key, _, value = word.partition("=")
        if key == "integrity":
            counts = parse_counts(value) or counts
        elif key == "harness" and value and len(patched) < MAX_HARNESSES:
            patched.append("".join(c for c in value[:MAX_HARNESS_NAME] if c.isalnum() or c in "._:-"))
    return counts, patched


def record(counts: dict[str, int] | None, patched: list[str] | None = None) -> dict[str, Any] | None:
    """The record the certificate carries; None when the tenant said nothing
    (an older client, a process without the library, a withdrawn region)."""
    patched = patched or []
    if counts is None and not patched:
        return None
    counts = counts or dict.fromkeys(COUNTS, 0)
    windows = counts["windows"]
    flags: dict[str, dict[str, Any]] = {}
    for name in FLAGS[:-1]:
        if counts.get(name):
            flags[name] = {"count": counts[name], "reason": f"{counts[name]} of {windows} window(s): {REASONS[name]}"}
    if patched:
        flags["patched_harness"] = {"count": len(patched),
                                    "reason": f"{', '.join(patched)}: {REASONS['patched_harness']}"}
    return {"windows": windows, "clean": not flags, "summary": summary_of(windows, flags), "flags": flags}


def summary_of(windows: int, flags: dict[str, dict[str, Any]]) -> str:
    if not flags:
        return f"integrity: clean ({windows} timed window{'' if windows == 1 else 's'})"
    named = ", ".join(f"{name} {f['count']}" for name, f in flags.items())
    return f"integrity: flagged ({named}; {windows} timed window{'' if windows == 1 else 's'})"


def lines(rec: dict[str, Any] | None) -> list[str]:
    """The record as lines: its summary, then one per flag."""
    if not rec:
        return []
    return [rec["summary"]] + [f"{name}: {f['reason']}" for name, f in rec.get("flags", {}).items()]


def words(counts: str | None, patched: list[str]) -> str:
    """The integrity words a client appends to EXIT."""
    out = [f"integrity={counts}"] if counts else []
    return " ".join(out + [f"harness={name[:MAX_HARNESS_NAME]}" for name in patched[:MAX_HARNESSES]])


_library: list[Any] = []  # [krex_region_integrity or None], looked up once per process


def library_counts() -> str | None:
    """This process's counts from libkrex.so (preloaded by the runtime), or
    None without it or without a gate (nothing was judged)."""
    import ctypes  # here: a candidate that never releases a region does not pay for it

    if not _library:
        try:
            fn = ctypes.CDLL(None).krex_region_integrity
            fn.argtypes, fn.restype = [ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int
        except (AttributeError, OSError):
            fn = None
        _library.append(fn)
    if _library[0] is None:
        return None
    buf = ctypes.create_string_buffer(128)
    n = _library[0](buf, len(buf))
    return buf.value.decode("ascii") if n > 0 else None
