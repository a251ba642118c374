"""Measurement integrity of a region, as this tenant process knows it: the
counts the interception library (native/src/intercept/intercept_integrity.c)
kept of each CUDA-event timing taken inside it, the driver's elapsed times of
those windows (intercept_timing.c), and the timing harnesses and framework
timers found replaced (by auto-regions, tenant/auto_region.py, and the check
of tenant/framework_timers.py). The region client sends them with EXIT, in
the words krex_runtime/region_wire.py defines; the runtime makes the
region's record of them there too. docs/integrity.md says what each flag
means. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from krex_runtime.tenant import framework_timers

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
    """The harnesses found replaced so far, the release checks (and the
    framework timers' check) run first."""
    for check in [*release_checks, look_at_timers]:
        try:
            check()
        except Exception:  # a check must never make a release fail
            pass
    return list(patched_harnesses)


def look_at_timers() -> None:
    """The framework timers (tenant/framework_timers.py) as they are now: the
    first look at each remembers it, a replaced one is noted. The region
    client looks at each entry too, so a replacement between an entry and
    its release is told from the original."""
    for name in framework_timers.replaced():
        note_patched(name)


_library: dict[str, Any] = {}  # name -> the function of libkrex.so or None, looked up once per process


def _ask(name: str) -> str | None:
    """The line `name` (a `krex_region_*(char *, size_t)` of libkrex.so,
    preloaded by the runtime) writes, or None without the library, without
    a gate (nothing was judged) or when it has nothing to say."""
    import ctypes  # here: a candidate that never releases a region does not pay for it

    if name not in _library:
        try:
            fn = getattr(ctypes.CDLL(None), name)
            fn.argtypes, fn.restype = [ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int
        except (AttributeError, OSError):
            fn = None  # no library, or one from before this function
        _library[name] = fn
    if _library[name] is None:
        return None
    buf = ctypes.create_string_buffer(256)
    n = _library[name](buf, len(buf))
    return buf.value.decode("ascii") if n > 0 else None


def library_counts() -> str | None:
    """This process's integrity counts for the region (krex_region_integrity)."""
    return _ask("krex_region_integrity")


def library_timing() -> str | None:
    """The driver's elapsed times of the region's judged windows, summarised
    (krex_region_timing); None when none was judged."""
    return _ask("krex_region_timing")


_staged: list[Any] = []  # [krex_forward_staged_copies] once found


def staged_copies() -> int:
    """Copies of page-locked memory forwarded mode's client has staged so far
    in this process (not the one DMA the program asked for: flag
    `staged_copy`); 0 when the driver loaded is not that client, or none is
    loaded yet (looked for again next time). The region client takes it at
    the grant and at the release, as the C region API does."""
    import ctypes

    if not _staged:
        try:  # only a driver already loaded (RTLD_NOLOAD): the count is of copies it made
            lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            staged = lib.krex_forward_staged_copies
        except (AttributeError, OSError):
            return 0
        staged.argtypes, staged.restype = [], ctypes.c_ulonglong
        _staged.append(staged)
    return int(_staged[0]())
