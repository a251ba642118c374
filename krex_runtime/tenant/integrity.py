"""Measurement integrity of a region, as this tenant process knows it: the
counts the interception library (native/src/intercept/intercept_integrity.c)
kept of each CUDA-event timing taken inside it, and the timing harnesses
auto-regions found replaced after import. The region client sends both with
EXIT, in the words krex_runtime/region_wire.py defines; the runtime makes
the region's record of them there too. docs/integrity.md says what each flag
means. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
