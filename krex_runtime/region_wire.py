"""THE region channel's wire protocol (docs/native.md, "Region channel"),
one definition for both its ends: the Python client (tenant/region.py) and
the runtime's channel (regions/channel.py) import it, and the C client's
header (native/src/intercept/region_protocol.h) is generated from PROTOCOL
here by native/tools/gen_region_protocol.py (`make -C native
region-protocol`; a test fails while the two differ).

It holds the version a tenant names in its HELLO (raise it when a message
changes meaning), the bound on a line, and the measurement-integrity words
an EXIT carries and RELEASED echoes (docs/integrity.md: what the
interception library, native/src/intercept/intercept_integrity.c, saw of
each CUDA-event timing in the region, and the timing harnesses auto-regions
found replaced), with the record the runtime makes of them for the region's
certificate. Standard library only, and nothing of the runtime: every
candidate imports it, and it stands below both ends.
"""

from __future__ import annotations

import math
import re
from typing import Any

PROTOCOL = 2
# Bytes before the newline, both ways. The longest valid line: an EXIT with
# the counts, the timing summary and MAX_HARNESSES names, about 530, or its
# RELEASED echo with the exit flags.
MAX_LINE = 768


def hello(tenant_id: str, pid: str, token: str) -> str:
    """The first line a client sends: who it is, and the version it speaks."""
    return f"HELLO {PROTOCOL} {tenant_id} {pid} {token}"


HELLO_USAGE = hello("<tenant_id>", "<pid>", "<token>")

# EXIT's integrity words: `integrity=<windows>,<escaped>,<other_thread>,<empty>,<stream_mismatch>`
# (from `krex_region_integrity` in libkrex.so), `timing=<windows>,<median>,<min>,<p10>,<p90>,<max>,<mean>,<dropped>`
# (the driver's elapsed times of the judged windows, in ms, from `krex_region_timing`; a
# client before it sends none), `harness=<name>` once per replaced harness, and
# `staged=<n>`: forwarded mode's staged copies of page-locked memory inside the region (flag `staged_copy`).
COUNTS = ("windows", "escaped", "other_thread", "empty", "stream_mismatch")
TIMING = ("windows", "median_ms", "min_ms", "p10_ms", "p90_ms", "max_ms", "mean_ms", "dropped", "host_paced")
# host_paced: the judged windows whose host-side span (start record to end record) was at least
# 80% of their GPU time: the host paced the GPU there (launch issue, or host waits in the window),
# so the host's load moves that time (docs/integrity.md, "Times from below").
MAX_TIMED_WINDOWS = 4096  # the library keeps this many times per region (intercept_timing.c)
FLAGS = ("escaped", "other_thread", "empty", "stream_mismatch", "patched_harness")
REASONS = {
    "escaped": "work launched in the window on a stream the end event's stream never waited on "
               "(no event wait, no sync before the end record): it may run after the end event",
    "other_thread": "launches from another thread of the process during the window",
    "empty": "a timed window that holds no kernel or graph launch (the work was queued after the end record, "
             "or elsewhere)",
    "stream_mismatch": "the events were recorded on a stream no launch of the window used, and that work was "
                       "not forked from the start record and joined before the end record: it may run outside "
                       "the window",
    "patched_harness": "the timing harness called is not the module's original (replaced after import)",
    "staged_copy": "copies from or to page-locked host memory inside the region went through forwarded mode's "
                   "staging (memory the program registered, or beyond its pinned arena), not the one DMA asked "
                   "for: event timings around them measure the staging",
}
MAX_COUNT = 1 << 62
MAX_HARNESS_NAME = 48
MAX_HARNESSES = 4  # an EXIT line and its RELEASED reply stay within MAX_LINE


def parse_counts(text: str) -> dict[str, int] | None:
    """`W,E,T,Z,M` as sent in EXIT; None when it is not that."""
    parts = text.split(",")
    if len(parts) != len(COUNTS) or not all(p.isascii() and p.isdigit() and len(p) <= 19 for p in parts):
        return None
    values = [min(int(p), MAX_COUNT) for p in parts]
    return dict(zip(COUNTS, values, strict=True))


def parse_staged(arg: str) -> int:
    """`staged=<n>` of an EXIT line (forwarded mode's staged copies inside the region); 0 when absent."""
    for word in arg.split():
        key, _, value = word.partition("=")
        if key == "staged" and value.isascii() and value.isdigit() and len(value) <= 19:
            return min(int(value), MAX_COUNT)
    return 0


_MS = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?")  # ASCII digits only


def parse_timing(text: str) -> dict[str, Any] | None:
    """`N,median,min,p10,p90,max,mean,dropped,host_paced` as sent in EXIT (N
    windows summarised, 1 to MAX_TIMED_WINDOWS; times in ms, finite, min <=
    each of median, p10, p90 <= max; a library before host_paced sends eight
    fields: host_paced None); None when it is not that."""
    parts = text.split(",")
    if len(parts) == len(TIMING) - 1:
        parts.append("")
    if len(parts) != len(TIMING):
        return None
    first, *times, last, paced = parts
    counts = [first, last] + ([paced] if paced else [])
    if not all(c.isascii() and c.isdigit() and len(c) <= 19 for c in counts):
        return None
    if not all(_MS.fullmatch(t) for t in times) or not 1 <= int(first) <= MAX_TIMED_WINDOWS:
        return None
    ms = [float(t) for t in times]
    median, low, p10, p90, high, _mean = ms
    if not all(math.isfinite(x) for x in ms) or not all(low <= x <= high for x in (median, p10, p90)):
        return None
    return dict(zip(TIMING, [int(first), *ms, min(int(last), MAX_COUNT),
                             min(int(paced), MAX_COUNT) if paced else None], strict=True))


def timing_text(timing: dict[str, Any]) -> str:
    """The `timing=` value of a parsed summary (RELEASED echoes it): repr()
    gives back the very floats that were parsed."""
    fields = [k for k in TIMING if k != "host_paced" or timing.get(k) is not None]
    return ",".join(str(timing[k]) if k in ("windows", "dropped", "host_paced") else repr(float(timing[k]))
                    for k in fields)


def parse_exit(arg: str) -> tuple[dict[str, int] | None, list[str], dict[str, Any] | None]:
    """The integrity words of an EXIT line: (counts or None, patched harness
    names, timing summary or None: taken only beside the counts)."""
    counts: dict[str, int] | None = None
    timing: dict[str, Any] | None = None
    patched: list[str] = []
    for word in arg.split():
        key, _, value = word.partition("=")
        if key == "integrity":
            counts = parse_counts(value) or counts
        elif key == "timing":
            timing = parse_timing(value) or timing
        elif key == "harness" and value and len(patched) < MAX_HARNESSES:
            patched.append("".join(c for c in value[:MAX_HARNESS_NAME] if c.isalnum() or c in "._:-"))
    return counts, patched, timing if counts is not None else None


def record(counts: dict[str, int] | None, patched: list[str] | None = None,
           timing: dict[str, Any] | None = None, staged: int = 0) -> dict[str, Any] | None:
    """The record the certificate carries; None when the tenant said nothing
    (an older client, a process without the library, a withdrawn region).
    `timing` is the driver's elapsed times of the judged windows (None: none
    judged, or a client that does not send them)."""
    patched = patched or []
    if counts is None and not patched and not staged:
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
    if staged:
        flags["staged_copy"] = {"count": staged, "reason": f"{staged} cop{'y' if staged == 1 else 'ies'}: "
                                                           f"{REASONS['staged_copy']}"}
    return {"windows": windows, "clean": not flags, "summary": summary_of(windows, flags), "flags": flags,
            "timing": dict(timing) if timing else None}


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


def words(counts: str | None, patched: list[str], timing: str | None = None, staged: int = 0) -> str:
    """The integrity words a client appends to EXIT (the timing only beside the counts)."""
    out = [f"integrity={counts}"] if counts else []
    out += [f"timing={timing}"] if counts and timing else []
    out += [f"harness={name[:MAX_HARNESS_NAME]}" for name in patched[:MAX_HARNESSES]]
    return " ".join(out + ([f"staged={staged}"] if staged else []))
