"""Text for the views: every figure that may be missing renders as "n/a".

Missing data is a value (an NVML read that failed, a field an older runtime
does not send); these helpers are where it becomes text, so no view has to
remember to check.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

NA = "n/a"
SPARK_CHARS = "▁▂▃▄▅▆▇█"
# A region's certificate (regions/certificate.py), in one colour wherever it shows:
# the Events rows, the region timeline.
VERDICT_STYLE = {"verified": "green", "perturbed": "magenta", "violated": "bold red", "unknown": "yellow"}


def number(value: Any) -> float | None:
    """`value` as a finite float, or None for anything else (None, str, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return float(value)


def get(data: Any, key: str) -> Any:
    """`data[key]` when data is a dict that has it, else None."""
    return data.get(key) if isinstance(data, dict) else None


def duration(seconds: Any) -> str:
    s = number(seconds)
    if s is None:
        return NA
    if s < 0:
        s = 0.0
    if s < 0.001:
        return f"{s * 1e6:.0f}us"
    if s < 1:
        return f"{s * 1000:.1f}ms"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def elapsed(seconds: float) -> str:
    """Time since the runtime started, for the audit log: +12.345s, +61m02.5s, +25h03m."""
    s = max(0.0, seconds)
    if s < 3600:
        return f"+{s:.3f}s" if s < 60 else f"+{int(s // 60)}m{s % 60:04.1f}s"
    return f"+{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def clock(t: float) -> str:
    """A wall-clock time of day (UTC), for events of a runtime whose start is unknown."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _shown(value: Any, render: Callable[[float], str]) -> str:
    """`value` rendered when it is a number, else NA."""
    v = number(value)
    return NA if v is None else render(v)


def percent(value: Any, digits: int = 0) -> str:
    return _shown(value, lambda v: f"{v:.{digits}f}%")


def inflation(fraction: Any) -> str:
    """A canary inflation (0.012 = 1.2 % slower than its idle baseline)."""
    return _shown(fraction, lambda v: f"{v * 100:+.1f}%")


def inflation_short(fraction: Any) -> str:
    """An inflation in few cells: +0.3%, +12%, +272%."""
    return _shown(fraction, lambda v: f"{v * 100:+.1f}%" if abs(v) < 0.1 else f"{v * 100:+.0f}%")


def factor(value: Any) -> str:
    """A ratio such as the canary's contention factor (outside / inside)."""
    return _shown(value, lambda v: f"{v:.2f}x")


def bytes_(value: Any) -> str:
    v = number(value)
    if v is None:
        return NA
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f}{unit}" if unit == "B" else f"{v:.1f}{unit}"
        v /= 1024
    return NA  # unreachable: the loop returns at TiB


def memory(used: Any, total: Any) -> str:
    u, t = number(used), number(total)
    if u is None and t is None:
        return NA
    return f"{bytes_(u) if u is not None else NA}/{bytes_(t) if t is not None else NA}"


def memory_short(used: Any, total: Any) -> str:
    """Used/total in the unit of the total: 60/140G, 1.2/1.5T, 512/1024M."""
    u, t = number(used), number(total)
    if u is None and t is None:
        return NA
    scale = t if t is not None else u
    assert scale is not None
    for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20)):
        if scale >= size or unit == "M":
            break
    digits = 1 if scale / size < 10 else 0

    def part(v: float | None) -> str:
        return NA if v is None else f"{v / size:.{digits}f}"

    return f"{part(u)}/{part(t)}{unit}"


def value(v: Any, unit: str = "") -> str:
    n = number(v)
    return NA if n is None else f"{n:.0f}{unit}"


def sparkline(samples: list[float | None], width: int = 8) -> str:
    """The last `width` samples as block characters; a missing sample is a space."""
    recent = samples[-width:]
    known = [s for s in recent if s is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = high - low
    out = []
    for s in recent:
        if s is None:
            out.append(" ")
        elif span <= 0:
            out.append(SPARK_CHARS[0] if high == 0 else SPARK_CHARS[len(SPARK_CHARS) // 2])
        else:
            out.append(SPARK_CHARS[int((s - low) / span * (len(SPARK_CHARS) - 1))])
    return "".join(out)


def short_uuid(uuid: str, keep: int = 12) -> str:
    return uuid if len(uuid) <= keep else uuid[: keep - 1] + "…"


def argv_text(argv: list[str], width: int = 60) -> str:
    text = " ".join(argv)
    return text if len(text) <= width else text[: width - 1] + "…"


# Interpreter options that take a value (python -X dev -W error -m mod ...).
_PYTHON_VALUE_OPTIONS = frozenset({"-X", "-W", "-Q"})


def command_text(argv: list[str]) -> str:
    """The part of a command line that says what runs: for a Python command its
    script or module and their arguments (not the interpreter's path and
    options), for anything else the program's name and its arguments."""
    if not argv:
        return ""
    program = argv[0].rsplit("/", 1)[-1]
    rest = list(argv[1:])
    if program.startswith("python") or program in ("pypy", "pypy3"):
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
            option = rest.pop(0)
            if option in _PYTHON_VALUE_OPTIONS and rest:
                rest.pop(0)
        if rest and rest[0] == "-m" and len(rest) > 1:
            return " ".join(rest[1:])
        if rest and rest[0] == "-c":
            return " ".join([program, *rest])
        if rest:
            return " ".join(rest)
    return " ".join([program, *rest])
