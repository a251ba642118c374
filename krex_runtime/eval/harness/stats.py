"""The figures of a list of trial times (milliseconds), as the result's TIMES
carry them: median, min, p10, p90 (linear interpolation between the closest
ranks, numpy's default), mean and the population standard deviation."""

from __future__ import annotations

import math
import statistics
from typing import Any

DIGITS = 6  # milliseconds to the nanosecond


def percentile(times: list[float], q: float) -> float:
    """The q-th percentile (0..100) of `times` (not empty)."""
    if not times:
        raise ValueError("no times")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside [0, 100]")
    ordered = sorted(times)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(times: list[float]) -> dict[str, Any]:
    """trials, median_ms, min_ms, p10_ms, p90_ms, mean_ms, std_ms."""
    if not times:
        raise ValueError("no times")
    figures = {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "p10_ms": percentile(times, 10),
        "p90_ms": percentile(times, 90),
        "mean_ms": statistics.fmean(times),
        "std_ms": statistics.pstdev(times),
    }
    return {"trials": len(times), **{k: round(v, DIGITS) for k, v in figures.items()}}
