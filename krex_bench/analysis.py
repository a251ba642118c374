"""The evaluation's figures, from the commands' results (pure Python, no GPU).

- throughput: commands per minute, and its ratio to native (and to ungated at
  the same concurrency);
- timing inflation: a candidate's median under a setup over its median under
  native, minus one; p50 and p95 per bucket of the native kernel duration,
  over every candidate (raw) and over the clock-matched ones only: those whose
  SM clock, read at the end of the measurement, is within a tolerance of the
  clock of the candidate's native measurement. A power-capped GPU runs the same
  kernel at different clocks from one run to the next (bf16 GEMMs on the H200:
  +-10% between two native runs), which is power-state noise, not
  interference; the matched figures leave it out, and the difference between
  the two says how much of the raw figure it was; and over the candidates
  whose regions were granted with no throttle reason (a power cap left by the
  drained tenants' work slows a region's first kernels). A p95 needs at least
  MIN_P95_N candidates in its bucket (with fewer it is nearly the maximum): it
  is nan below that, and the report says "n<8";
- ranking fidelity: over every pair of candidates of one problem, how often
  the setup orders the pair differently from native (the flip rate), grouped
  by how far apart native measured them; and Kendall's tau-b per problem.

The native repeat goes through the same functions: its figures are the noise
floor the others are read against.
"""

from __future__ import annotations

import math
import statistics
from itertools import combinations
from typing import Any

BUCKETS = ((">10 ms", 10.0, math.inf), ("1-10 ms", 1.0, 10.0), ("0.1-1 ms", 0.1, 1.0), ("<0.1 ms", 0.0, 0.1))
GAP_GROUPS = (("<2%", 0.0, 0.02), ("2-5%", 0.02, 0.05), ("5-10%", 0.05, 0.10), (">=10%", 0.10, math.inf))
MIN_P95_N = 8  # candidates a bucket needs before its p95 is quoted
CLOCK_MATCH = 0.02  # a measurement is clock-matched when its SM clock is within 2% of native's (H200 steps: 15 MHz)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def medians(run: dict[str, Any]) -> dict[str, float]:
    """Candidate key -> its median time in this run (ok results only)."""
    return {f"{r['problem']}/{r['candidate']}": r["median_ms"] for r in run.get("results", []) if r.get("ok")}


def sm_clocks(run: dict[str, Any]) -> dict[str, float | None]:
    """Candidate key -> the SM clock its measurement ended at (ok results only; None: not read)."""
    return {f"{r['problem']}/{r['candidate']}": r.get("sm_clock_mhz") for r in run.get("results", []) if r.get("ok")}


def clock_matched(
    times: dict[str, float], clocks: dict[str, float | None], native_clocks: dict[str, float | None], tolerance: float
) -> dict[str, float]:
    """The measurements whose SM clock is within `tolerance` of the native
    measurement's clock (either clock unknown: not matched)."""
    out = {}
    for key, ms in times.items():
        mine, base = clocks.get(key), native_clocks.get(key)
        if mine and base and abs(mine / base - 1) <= tolerance:
            out[key] = ms
    return out


def granted_unthrottled(times: dict[str, float], run: dict[str, Any]) -> dict[str, float]:
    """The measurements whose regions were all granted with no throttle reason
    (a power cap left by the drained tenants' work: region flags
    `throttled:...` at the grant). What stays is what the GPU's state at the
    grant cannot explain. A run without regions (native) keeps them all."""
    throttled = {
        f"{r['problem']}/{r['candidate']}"
        for r in run.get("results", [])
        if any(f.startswith("throttled:") for f in r.get("region_flags") or [])
    }
    return {k: ms for k, ms in times.items() if k not in throttled}


def throughput_per_min(run: dict[str, Any]) -> float:
    wall = run.get("wall_s")
    return len(run.get("results", [])) / wall * 60 if wall else math.nan


def bucket_of(ms: float) -> str:
    for name, lo, hi in BUCKETS:
        if lo <= ms < hi:
            return name
    raise ValueError(f"no bucket for {ms} ms")


def inflation(run: dict[str, float], native: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per bucket: n, p50 and p95 of (run / native - 1), as fractions (p95: nan
    with fewer than MIN_P95_N candidates), and the largest."""
    per_bucket: dict[str, list[float]] = {name: [] for name, _, _ in BUCKETS}
    for key, base in native.items():
        if key in run and base > 0:
            per_bucket[bucket_of(base)].append(run[key] / base - 1)
    return {
        name: {
            "n": len(v),
            "p50": percentile(v, 0.5),
            "p95": percentile(v, 0.95) if len(v) >= MIN_P95_N else math.nan,
            "max": max(v) if v else math.nan,
        }
        for name, v in per_bucket.items()
    }


def _problems(times: dict[str, float]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in sorted(times):
        out.setdefault(key.split("/", 1)[0], []).append(key)
    return out


def flips(run: dict[str, float], native: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per native gap group: pairs, flipped pairs and the flip rate."""
    counts = {name: [0, 0] for name, _, _ in GAP_GROUPS}
    for keys in _problems(native).values():
        for a, b in combinations([k for k in keys if k in run], 2):
            na, nb = native[a], native[b]
            gap = abs(na - nb) / min(na, nb)
            group = next(name for name, lo, hi in GAP_GROUPS if lo <= gap < hi)
            counts[group][0] += 1
            if (na - nb) * (run[a] - run[b]) < 0:
                counts[group][1] += 1
    return {
        name: {"pairs": pairs, "flips": flipped, "rate": flipped / pairs if pairs else math.nan}
        for name, (pairs, flipped) in counts.items()
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


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b of two paired samples (ties in either count as neither)."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif dx * dy > 0:
            concordant += 1
        else:
            discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else math.nan


def taus(run: dict[str, float], native: dict[str, float]) -> dict[str, float]:
    out = {}
    for problem, keys in _problems(native).items():
        common = [k for k in keys if k in run]
        out[problem] = kendall_tau_b([native[k] for k in common], [run[k] for k in common]) if len(common) > 1 else math.nan
    return out


def clocks(run: dict[str, Any]) -> dict[str, float]:
    seen = [r["sm_clock_mhz"] for r in run.get("results", []) if r.get("sm_clock_mhz")]
    if not seen:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(seen), "min": min(seen), "max": max(seen)}


def phase_shares(run: dict[str, Any]) -> dict[str, float]:
    """Each phase's share of the commands' summed phase time."""
    sums: dict[str, float] = {}
    for r in run.get("results", []):
        for phase, seconds in r.get("phases_s", {}).items():
            sums[phase] = sums.get(phase, 0.0) + seconds
    total = sum(sums.values())
    return {phase: s / total for phase, s in sums.items()} if total else {}


def verified_share(run: dict[str, Any]) -> float:
    """The share of the setup's regions whose certificate says `verified` (nan: no regions)."""
    verdicts = run.get("verdicts") or {}
    total = sum(verdicts.values())
    return verdicts.get("verified", 0) / total if total else math.nan


UNSTEADY_SPREAD = 0.01  # placement medians of a >=1 ms kernel this far apart: something changed mid-measurement
# The runtime's settle waits on the same reasons (regions/settle.py); krex_bench
# keeps to its public surface (an import-linter contract), so not imported.
POWER_STATES = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})


def unsteady(run: dict[str, Any], native: dict[str, float]) -> dict[str, Any]:
    """The measurements of kernels of 1 ms or more (by native) whose placements'
    medians lie more than UNSTEADY_SPREAD apart. Natively a long fp32 GEMM's
    four placements agree within 0.1%, so a spread means the kernel ran slower
    over part of the measurement (power-capped bf16 GEMMs spread natively too:
    the native runs are the floor). `keys`: the worst first. `causes`: what
    the clock watch saw over the slow placements (slow_cause()), by cause."""
    spreads = []
    for r in run.get("results", []):
        key, medians_ = f"{r['problem']}/{r['candidate']}", r.get("placement_medians_ms") or []
        if native.get(key, 0) >= 1.0 and len(medians_) > 1 and min(medians_) > 0:
            spreads.append((max(medians_) / min(medians_) - 1, key, r))
    over = sorted((s for s in spreads if s[0] > UNSTEADY_SPREAD), key=lambda s: s[:2], reverse=True)
    causes: dict[str, int] = {}
    for _, _, r in over:
        cause = slow_cause(r)
        causes[cause] = causes.get(cause, 0) + 1
    return {"n": len(over), "of": len(spreads), "keys": [k for _, k, _ in over], "causes": causes}


def slow_cause(result: dict[str, Any]) -> str:
    """What the clock watch saw while an unsteady measurement's slow
    placements ran (those more than UNSTEADY_SPREAD above the fastest), set
    against its other placements:
    - "power state": a power or thermal throttle reason in a slow placement;
    - "lower clock": no such reason, but a slow placement's lowest clock is
      below the other placements' lowest;
    - "same clock": watched, no reason, no lower clock: the kernel ran slower
      at the clock the others ran at, which a power state does not explain;
    - "unwatched": no watch, or no sample fell in a slow placement."""
    medians_, watch = result.get("placement_medians_ms") or [], result.get("placement_watch") or []
    if len(watch) != len(medians_) or not medians_:
        return "unwatched"
    fastest = min(medians_)
    slow = [w for m, w in zip(medians_, watch) if m > fastest * (1 + UNSTEADY_SPREAD)]
    rest = [w for m, w in zip(medians_, watch) if m <= fastest * (1 + UNSTEADY_SPREAD)]
    seen = [w for w in slow if w and w.get("clock_samples")]
    if not seen:
        return "unwatched"
    if any(POWER_STATES & set(w.get("throttle_seen") or []) for w in seen):
        return "power state"
    others = [w["sm_clock_min_mhz"] for w in rest if w and w.get("sm_clock_min_mhz")]
    lowest_other = min(others) if others else None
    if lowest_other and any(w.get("sm_clock_min_mhz") and w["sm_clock_min_mhz"] < lowest_other for w in seen):
        return "lower clock"
    return "same clock"


def throttled_during(run: dict[str, Any]) -> dict[str, int] | None:
    """How many measurements saw a power-state throttle reason while their
    repeats ran (krex_bench/clock_watch.py); None: no result says."""
    watched = [r["throttle_seen"] for r in run.get("results", []) if r.get("throttle_seen") is not None]
    if not watched:
        return None
    return {"n": sum(1 for seen in watched if POWER_STATES & set(seen)), "of": len(watched)}


def _off_clock(flags: list[str]) -> bool:
    """The region said its SM clock was off clock (below the GPU's top), at the grant or the release."""
    return any(f.removeprefix("exit:").startswith("clock:") for f in flags)


def summarize(data: dict[str, Any], clock_tolerance: float = CLOCK_MATCH) -> dict[str, Any]:
    """Every run's figures against native (and ungated at its concurrency)."""
    runs = [r for r in data["runs"] if "results" in r]
    by_label = {r["setup"]["label"]: r for r in runs}
    native_run = by_label.get("native")
    if native_run is None:
        raise ValueError("the results have no native run: every figure is relative to it")
    native = medians(native_run)
    native_clocks = sm_clocks(native_run)
    native_rate = throughput_per_min(native_run)
    rows = []
    for run in runs:
        setup = run["setup"]
        times = medians(run)
        matched = clock_matched(times, sm_clocks(run), native_clocks, clock_tolerance)
        unthrottled = granted_unthrottled(times, run)
        rate = throughput_per_min(run)
        ungated = by_label.get(f"ungated c{setup['concurrency']}")
        row = {
            "label": setup["label"],
            "setup": setup,
            "commands": run.get("commands", 0),
            "ok": len(run["results"]),
            "failed": len(run["failures"]),
            "wall_s": run.get("wall_s"),
            "pool_warm_s": run.get("pool_warm_s"),
            "throughput_per_min": rate,
            "vs_native": rate / native_rate if native_rate else math.nan,
            "vs_ungated": rate / throughput_per_min(ungated) if ungated and setup["kind"] == "krex" else math.nan,
            "inflation": inflation(times, native),
            "inflation_matched": inflation(matched, native),
            "clock_matched": {"n": len(matched), "of": len(times)},
            "inflation_unthrottled": inflation(unthrottled, native),
            "unthrottled": {"n": len(unthrottled), "of": len(times)},
            "off_clock": sum(1 for r in run["results"] if _off_clock(r.get("region_flags") or [])),
            "unsteady": unsteady(run, native),
            "throttled_during": throttled_during(run),
            "flips": flips(times, native),
            "tau_b": taus(times, native),
            "sm_clock_mhz": clocks(run),
            "phase_shares": phase_shares(run),
            "verified_share": verified_share(run),
        }
        rows.append(row)
    repeat = next((r for r in rows if r["label"] == "native-repeat"), None)
    for row in rows:
        row["flips_over_repeat_pts"] = flips_over(row["flips"], repeat["flips"]) if repeat else math.nan
    # A run from before UUIDs were recorded is "unknown" once any run has one:
    # merged with newer runs it may well come from another GPU.
    known = any(r.get("gpu_uuid") for r in runs)
    gpus = {r["setup"]["label"]: r.get("gpu_uuid") or "unknown GPU" for r in runs} if known else {}
    skipped = [r["setup"]["label"] for r in data["runs"] if "skipped" in r]
    errors = {r["setup"]["label"]: r["error"] for r in data["runs"] if "error" in r}
    return {"rows": rows, "skipped": skipped, "errors": errors, "clock_tolerance": clock_tolerance,
            "native_repeat": repeat is not None, "gpus": gpus}
