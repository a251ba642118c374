"""Text for the views: every figure that may be missing renders as "n/a".

Missing data is a value (an NVML read that failed, a field an older runtime
does not send); these helpers are where it becomes text, so no view has to
remember to check.
"""

from __future__ import annotations

import math
from typing import Any

NA = "n/a"
SPARK_CHARS = "▁▂▃▄▅▆▇█"


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


def percent(value: Any, digits: int = 0) -> str:
    v = number(value)
    return NA if v is None else f"{v:.{digits}f}%"


def inflation(fraction: Any) -> str:
    """A canary inflation (0.012 = 1.2 % slower than its idle baseline)."""
    v = number(fraction)
    return NA if v is None else f"{v * 100:+.1f}%"


def factor(value: Any) -> str:
    """A ratio such as the canary's contention factor (outside / inside)."""
    v = number(value)
    return NA if v is None else f"{v:.2f}x"


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
