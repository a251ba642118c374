"""Ranking fidelity: over every pair of candidates of one problem, how often
a setup orders the pair differently from native (the flip rate), grouped by
how far apart native measured them, and Kendall's tau-b per problem, each
with its percentile-bootstrap interval over the candidates (bootstrap.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from krex_bench.bootstrap import MIN_CI_N, NO_INTERVAL, RESAMPLES, intervals

GAP_GROUPS = (("<2%", 0.0, 0.02), ("2-5%", 0.02, 0.05), ("5-10%", 0.05, 0.10), (">=10%", 0.10, math.inf))


def _problems(times: dict[str, float]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in sorted(times):
        out.setdefault(key.split("/", 1)[0], []).append(key)
    return out


# How two measurements of a pair order it, against native's order.
BOTH_TIED, CONCORDANT, DISCORDANT, TIED_NATIVE, TIED_RUN = range(5)


def _order(dx: float, dy: float) -> int:
    if dx == 0:
        return BOTH_TIED if dy == 0 else TIED_NATIVE
    if dy == 0:
        return TIED_RUN
    return CONCORDANT if dx * dy > 0 else DISCORDANT


def _tau(counts: Sequence[float]) -> float:
    """Kendall's tau-b from pair counts by _order() (pairs tied in both count as neither)."""
    c, d = counts[CONCORDANT], counts[DISCORDANT]
    denominator = math.sqrt((c + d + counts[TIED_NATIVE]) * (c + d + counts[TIED_RUN]))
    return (c - d) / denominator if denominator else math.nan


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b of two paired samples (ties in either count as neither)."""
    counts = [0] * 5
    for i, j in combinations(range(len(x)), 2):
        counts[_order(x[i] - x[j], y[i] - y[j])] += 1
    return _tau(counts)


def ranking(run: dict[str, float], native: dict[str, float], resamples: int = RESAMPLES) -> dict[str, Any]:
    """Over every pair of candidates of one problem: per native gap group the
    pairs, the flipped pairs (ordered against native) and the flip rate
    (`flips`), and per problem Kendall's tau-b (`tau_b`), each with its
    interval (`ci`; from MIN_CI_N pairs, or candidates for a tau), the
    candidates of each problem drawn.

    A drawn sample holds a candidate m times: each pair of two candidates
    then counts m_a * m_b times, and a candidate's copies make no pair with
    each other (no gap, no order), as in the figures over a list with repeats."""
    # Per problem: its candidates, and its pairs (i, j) by (gap group, order).
    tables: list[tuple[list[str], dict[tuple[int, int], list[tuple[int, int]]]]] = []
    for keys in _problems(native).values():
        common = [k for k in keys if k in run]
        pairs: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for i, j in combinations(range(len(common)), 2):
            na, nb = native[common[i]], native[common[j]]
            gap = abs(na - nb) / min(na, nb)
            group = next(g for g, (_, lo, hi) in enumerate(GAP_GROUPS) if lo <= gap < hi)
            pairs.setdefault((group, _order(na - nb, run[common[i]] - run[common[j]])), []).append((i, j))
        tables.append((common, pairs))
    problems = list(_problems(native))

    def figures(weights: list[list[int]]) -> tuple[list[int], list[int], list[float]]:
        paired, flipped, taus = [0] * len(GAP_GROUPS), [0] * len(GAP_GROUPS), []
        for (_, pairs), m in zip(tables, weights, strict=True):
            counts = [0] * 5
            for (group, order), ij in pairs.items():
                w = sum(m[i] * m[j] for i, j in ij)
                paired[group] += w
                flipped[group] += w if order == DISCORDANT else 0
                counts[order] += w
            taus.append(_tau(counts) if len(m) > 1 else math.nan)
        return paired, flipped, taus

    def statistic(drawn: list[list[int]]) -> list[float]:
        weights = []
        for indices, (common, _) in zip(drawn, tables, strict=True):
            m = [0] * len(common)
            for i in indices:
                m[i] += 1
            weights.append(m)
        paired, flipped, taus = figures(weights)
        return [f / p if p else math.nan for p, f in zip(paired, flipped, strict=True)] + taus

    paired, flipped, taus = figures([[1] * len(common) for common, _ in tables])
    found = intervals([range(len(common)) for common, _ in tables], statistic, resamples)
    return {
        "flips": {
            name: {"pairs": p, "flips": f, "rate": f / p if p else math.nan,
                   "ci": {"rate": list(ci if p >= MIN_CI_N else NO_INTERVAL)}}
            for (name, _, _), p, f, ci in zip(GAP_GROUPS, paired, flipped, found, strict=False)  # found: the taus' too
        },
        "tau_b": {
            problem: {"tau": tau, "ci": {"tau": list(ci if len(common) >= MIN_CI_N else NO_INTERVAL)}}
            for problem, tau, ci, (common, _) in zip(problems, taus, found[len(GAP_GROUPS):], tables, strict=True)
        },
    }


def flips_over(run: dict[str, dict[str, float]], repeat: dict[str, dict[str, float]]) -> float:
    """The largest excess, in percentage points, of a run's flip rate over the
    native repeat's in any gap group both have pairs in (the noise floor)."""
    excess = [
        (run[g]["rate"] - repeat[g]["rate"]) * 100
        for g, _, _ in GAP_GROUPS
        if run[g]["pairs"] and repeat[g]["pairs"]
    ]
    return max(excess) if excess else math.nan
