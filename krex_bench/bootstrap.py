"""Percentile-bootstrap intervals for the report's figures (pure Python).

A report's figure (a bucket's p95 inflation, a flip rate, a Kendall tau) is
one draw of the candidates the workload happens to have: another set of
candidates of the same kinds would give another figure. The bootstrap says
how far: the candidates are drawn again with replacement, as many as there
are, the figure computed on the draw, RESAMPLES times, and the interval is
the middle 95% of those figures (the percentile bootstrap).

The unit drawn is the candidate, never the single measurement: a candidate's
repeats are not independent of each other (same kernel, same build), so a
candidate drawn twice brings all its measurements twice. Draws are made per
stratum (a bucket, a problem) so that each keeps its size.

The generator is seeded with a fixed SEED: the same results give the same
intervals, so a report made again from results.json is the same report.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

RESAMPLES = 2000
SEED = 20261204
LEVEL = 0.95
# Candidates (for a flip rate: pairs) a figure needs before its interval is
# quoted: drawing again from fewer gives a handful of distinct samples, and
# their spread says little (from one pair: always the same rate).
MIN_CI_N = 4

T = TypeVar("T")
Interval = tuple[float, float]
NO_INTERVAL: Interval = (math.nan, math.nan)


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of values already sorted, by linear interpolation between
    closest ranks (numpy's default); nan for no values."""
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def intervals(
    strata: Sequence[Sequence[T]],
    statistic: Callable[[list[list[T]]], Sequence[float]],
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> list[Interval]:
    """For each figure `statistic` returns, its LEVEL percentile interval over
    `resamples` draws, each stratum drawn with replacement to its own size.
    Draws where a figure is undefined (nan: e.g. a group left with no pair)
    do not count for it; a figure never defined has NO_INTERVAL."""
    draws = _draws(tuple(len(s) for s in strata), resamples, seed)
    figures = [statistic([[s[i] for i in picked] for s, picked in zip(strata, draw, strict=True)]) for draw in draws]
    tail = (1 - LEVEL) / 2
    out = []
    for values in zip(*figures, strict=True):
        finite = sorted(v for v in values if not math.isnan(v))
        out.append((quantile(finite, tail), quantile(finite, 1 - tail)) if finite else NO_INTERVAL)
    return out


@functools.lru_cache(maxsize=64)
def _draws(sizes: tuple[int, ...], resamples: int, seed: int) -> list[list[list[int]]]:
    """The indices drawn, per resample and stratum: a function of the sizes
    and the seed alone, so figures over strata of one size are drawn alike
    (and a report's many figures share the work of drawing)."""
    rng = random.Random(seed)
    return [[[math.floor(rng.random() * n) for _ in range(n)] for n in sizes] for _ in range(resamples)]


def overlap(a: Interval, b: Interval) -> bool | None:
    """Whether two intervals share a point; None where either is unknown."""
    if any(math.isnan(x) for x in (*a, *b)):
        return None
    return a[0] <= b[1] and b[0] <= a[1]
