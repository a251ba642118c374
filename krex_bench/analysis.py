"""The evaluation's figures, from the commands' results (pure Python, no GPU).

- throughput: commands per minute (every measurement a command), as a share
  of native's, of ungated's at the same concurrency, and of the
  region-serialisation bound: the most commands a minute can hold if every
  command's timed region runs alone on the GPU, one after another (native's
  mean region time);
- timing inflation: a candidate's median under a setup over its median under
  native, minus one (with --repeats, a candidate's median is the median of
  its measurements' medians); p50, p90 and p95 per bucket of the native
  kernel duration, over every candidate (raw) and over the clock-matched
  measurements only: those whose SM clock, read at the end of the
  measurement, is within a tolerance of the clock of the candidate's native
  measurement. A power-capped GPU runs the same kernel at different clocks
  from one run to the next (bf16 GEMMs on the H200: +-10% between two native
  runs), which is power-state noise, not interference; the matched figures
  leave it out, and the difference between the two says how much of the raw
  figure it was; and over the measurements whose regions were granted with
  no throttle reason (a power cap left by the drained tenants' work slows a
  region's first kernels). A p90 or p95 needs at least MIN_P95_N candidates
  in its bucket (with fewer it is nearly the maximum): it is nan below that,
  and the report says "n<8";
- ranking fidelity (ranking.py): over every pair of candidates of one
  problem, how often the setup orders the pair differently from native (the
  flip rate), grouped by how far apart native measured them; and Kendall's
  tau-b per problem;
- the within-measurement spread: each measurement's median over its fastest
  repeat, minus one, which needs no native run.

Every percentile, flip rate and tau comes with a percentile-bootstrap 95%
interval over the candidates (krex_bench/bootstrap.py). The native repeat
goes through the same functions: its figures and intervals are the noise
floor the others are read against, and each interval of a setup is marked
with whether it overlaps the repeat's.
"""

from __future__ import annotations

import math
import statistics
from itertools import chain
from typing import Any

from krex_bench.bootstrap import MIN_CI_N, NO_INTERVAL, RESAMPLES, intervals, overlap, quantile
from krex_bench.ranking import flips_over, ranking

BUCKETS = ((">10 ms", 10.0, math.inf), ("1-10 ms", 1.0, 10.0), ("0.1-1 ms", 0.1, 1.0), ("<0.1 ms", 0.0, 0.1))
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95))
MIN_P95_N = 8  # values a bucket needs before its tail percentiles (p90, p95) are quoted
CLOCK_MATCH = 0.02  # a measurement is clock-matched when its SM clock is within 2% of native's (H200 steps: 15 MHz)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    return quantile(sorted(values), q)


def _key(result: dict[str, Any]) -> str:
    return f"{result['problem']}/{result['candidate']}"


def _ok(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's measurements: its ok result lines, every repeat of every candidate."""
    return [r for r in run.get("results", []) if r.get("ok")]


def _per_candidate(lines: list[dict[str, Any]], field: str) -> dict[str, list[Any]]:
    """Candidate key -> the field's value in each of its measurements (missing: left out)."""
    out: dict[str, list[Any]] = {}
    for r in lines:
        if r.get(field) is not None:
            out.setdefault(_key(r), []).append(r[field])
    return out


def medians(lines: list[dict[str, Any]]) -> dict[str, float]:
    """Candidate key -> the median of its measurements' medians (with
    --repeats N a candidate has N; one slow repeat does not move it)."""
    return {key: statistics.median(ms) for key, ms in _per_candidate(lines, "median_ms").items()}


def sm_clocks(lines: list[dict[str, Any]]) -> dict[str, float | None]:
    """Candidate key -> the median SM clock its measurements ended at (None: none read)."""
    return {key: statistics.median(mhz) for key, mhz in _per_candidate(lines, "sm_clock_mhz").items()}


def clock_within(mine: float | None, base: float | None, tolerance: float) -> bool:
    """A measurement is clock-matched when its SM clock is within `tolerance`
    of the native measurement's clock (either clock unknown: not matched)."""
    return bool(mine and base and abs(mine / base - 1) <= tolerance)


def throttled_at_grant(result: dict[str, Any]) -> bool:
    """Whether one of the measurement's regions was granted with a throttle
    reason (a power cap left by the drained tenants' work: region flags
    `throttled:...` at the grant). Leaving those out keeps what the GPU's
    state at the grant cannot explain; a run without regions has none."""
    return any(f.startswith("throttled:") for f in result.get("region_flags") or [])


def host_paced(result: dict[str, Any]) -> bool | None:
    """Whether the host paced most of the measurement's timed windows (its
    region's `integrity.timing.host_paced`, docs/integrity.md): the GPU
    waited on the host there, so host load moves the figure while the region
    stays exclusive on the GPU. None: the region's record has no such count."""
    paced, windows = result.get("host_paced"), result.get("timed_windows")
    if not isinstance(paced, int) or not isinstance(windows, int) or windows <= 0:
        return None
    return paced * 2 >= windows


def throughput_per_min(run: dict[str, Any]) -> float:
    """Commands per minute: every measurement counts, each repeat a command."""
    wall = run.get("wall_s")
    return len(run.get("results", [])) / wall * 60 if wall else math.nan


GPUS_USED = 1  # the runner puts every setup on one GPU (--gpu N, or the simulated one)


def region_bound(native_run: dict[str, Any]) -> dict[str, float]:
    """The most commands per minute any setup can reach if the timed regions
    of all commands must run one after another on the GPU: 60 s over the
    mean time a native command spent in its region (its `timing` phase),
    times the GPUs used. A setup above it overlapped timed regions."""
    timing = [r["phases_s"]["timing"] for r in _ok(native_run) if "timing" in (r.get("phases_s") or {})]
    mean = statistics.fmean(timing) if timing else math.nan
    return {"n": len(timing), "mean_region_s": mean,
            "per_min": 60 / mean * GPUS_USED if timing and mean > 0 else math.nan}


def bucket_of(ms: float) -> str:
    for name, lo, hi in BUCKETS:
        if lo <= ms < hi:
            return name
    raise ValueError(f"no bucket for {ms} ms")


def quantile_figures(clusters: list[list[float]], resamples: int = RESAMPLES) -> dict[str, Any]:
    """Over the values of every cluster (a candidate's, one per measurement or
    one in all): n (values), p50, p90 and p95 (the tails nan under MIN_P95_N
    values: with fewer they are nearly the maximum), the largest, and each
    quoted percentile's interval (`ci`; from MIN_CI_N clusters), drawing
    whole clusters."""
    values = sorted(v for c in clusters for v in c)
    quoted = [(name, q) for name, q in PERCENTILES if name == "p50" or len(values) >= MIN_P95_N]
    single = all(len(c) == 1 for c in clusters)  # one value a candidate: draw the values themselves

    def statistic(drawn: list[list[Any]]) -> list[float]:
        ordered = sorted(drawn[0] if single else chain.from_iterable(drawn[0]))
        return [quantile(ordered, q) for _, q in quoted]

    stratum: list[Any] = [c[0] for c in clusters] if single else clusters
    drawn = len(clusters) >= MIN_CI_N
    found = dict(zip([name for name, _ in quoted], intervals([stratum], statistic, resamples), strict=True)) if drawn else {}
    out: dict[str, Any] = {"n": len(values)}
    for name, q in PERCENTILES:
        out[name] = quantile(values, q) if (name, q) in quoted else math.nan
    out["max"] = values[-1] if values else math.nan
    out["ci"] = {name: list(found.get(name, NO_INTERVAL)) for name, _ in PERCENTILES}
    return out


def inflation(run: dict[str, float], native: dict[str, float], resamples: int = RESAMPLES) -> dict[str, dict[str, Any]]:
    """Per bucket of the native time, over the candidates in it, of (run /
    native - 1) as fractions: quantile_figures(), the candidates drawn."""
    per_bucket: dict[str, list[list[float]]] = {name: [] for name, _, _ in BUCKETS}
    for key, base in native.items():
        if key in run and base > 0:
            per_bucket[bucket_of(base)].append([run[key] / base - 1])
    return {name: quantile_figures(v, resamples) for name, v in per_bucket.items()}


def spread(lines: list[dict[str, Any]], resamples: int = RESAMPLES) -> dict[str, Any]:
    """The within-measurement spread, a signal that needs no native run: per
    measurement its median over its fastest repeat, minus one (a kernel slowed
    over part of its repeats pulls the median away from the minimum);
    quantile_figures() of them, drawing candidates with all their measurements."""
    clusters: dict[str, list[float]] = {}
    for r in lines:
        if r.get("median_ms") and r.get("min_ms"):
            clusters.setdefault(_key(r), []).append(r["median_ms"] / r["min_ms"] - 1)
    return quantile_figures(list(clusters.values()), resamples)


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
# The runtime's settle waits on the same reasons (regions/entry/settle.py); krex_bench
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
    slow = [w for m, w in zip(medians_, watch, strict=True) if m > fastest * (1 + UNSTEADY_SPREAD)]
    rest = [w for m, w in zip(medians_, watch, strict=True) if m <= fastest * (1 + UNSTEADY_SPREAD)]
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


def _mark_overlaps(figures: dict[str, Any], floor: dict[str, Any]) -> None:
    """Beside each interval of `figures` (`ci`), whether it overlaps the
    native repeat's interval of the same figure (`overlaps_repeat`: None
    where either is unknown): no overlap is a difference the noise floor
    does not explain."""
    figures["overlaps_repeat"] = {
        name: overlap(tuple(ci), tuple(floor["ci"].get(name, NO_INTERVAL))) for name, ci in figures["ci"].items()
    }


def _against_repeat(row: dict[str, Any], repeat: dict[str, Any]) -> None:
    """Every interval of a row set against the repeat's (_mark_overlaps)."""
    for kind in ("inflation", "inflation_matched", "inflation_unthrottled", "flips"):
        for name, figures in row[kind].items():
            _mark_overlaps(figures, repeat[kind][name])
    for problem, figures in row["tau_b"].items():
        _mark_overlaps(figures, repeat["tau_b"].get(problem) or {"ci": {}})
    _mark_overlaps(row["spread"], repeat["spread"])


def summarize(data: dict[str, Any], clock_tolerance: float = CLOCK_MATCH, resamples: int = RESAMPLES) -> dict[str, Any]:
    """Every run's figures against native (and ungated at its concurrency),
    each percentile, flip rate and tau with its bootstrap interval and
    whether that overlaps the native repeat's."""
    runs = [r for r in data["runs"] if "results" in r]
    by_label = {r["setup"]["label"]: r for r in runs}
    native_run = by_label.get("native")
    if native_run is None:
        raise ValueError("the results have no native run: every figure is relative to it")
    native = medians(_ok(native_run))
    native_clocks = sm_clocks(_ok(native_run))
    native_rate = throughput_per_min(native_run)
    bound = region_bound(native_run)
    rows = []
    for run in runs:
        setup = run["setup"]
        lines = _ok(run)
        times = medians(lines)
        # Per measurement: a candidate's repeats may land at different clocks, or some under a cap.
        matched = [r for r in lines if clock_within(r.get("sm_clock_mhz"), native_clocks.get(_key(r)), clock_tolerance)]
        unthrottled = [r for r in lines if not throttled_at_grant(r)]
        rate = throughput_per_min(run)
        ungated = by_label.get(f"ungated c{setup['concurrency']}")
        row = {
            "label": setup["label"],
            "setup": setup,
            "commands": run.get("commands", 0),
            "repeats": run.get("repeats", 1),
            "ok": len(run["results"]),
            "failed": len(run["failures"]),
            "wall_s": run.get("wall_s"),
            "pool_warm_s": run.get("pool_warm_s"),
            "throughput_per_min": rate,
            "vs_native": rate / native_rate if native_rate else math.nan,
            "vs_ungated": rate / throughput_per_min(ungated) if ungated and setup["kind"] == "krex" else math.nan,
            "vs_region_bound": rate / bound["per_min"] if bound["per_min"] > 0 else math.nan,
            "inflation": inflation(times, native, resamples),
            "inflation_matched": inflation(medians(matched), native, resamples),
            "clock_matched": {"n": len(matched), "of": len(lines)},
            "inflation_unthrottled": inflation(medians(unthrottled), native, resamples),
            # Split by what paced the timed windows: the host's share of an inflation shows
            # as a gap between the two (host-paced measurements inflated, the others not).
            "inflation_host_paced": inflation(medians([r for r in lines if host_paced(r) is True]), native, resamples),
            "inflation_issued_ahead": inflation(medians([r for r in lines if host_paced(r) is False]), native,
                                                resamples),
            "host_paced": {"n": sum(1 for r in lines if host_paced(r) is True),
                           "known": sum(1 for r in lines if host_paced(r) is not None), "of": len(lines)},
            "unthrottled": {"n": len(unthrottled), "of": len(lines)},
            "off_clock": sum(1 for r in run["results"] if _off_clock(r.get("region_flags") or [])),
            "unsteady": unsteady(run, native),
            "throttled_during": throttled_during(run),
            **ranking(times, native, resamples),
            "spread": spread(lines, resamples),
            "sm_clock_mhz": clocks(run),
            "phase_shares": phase_shares(run),
            "verified_share": verified_share(run),
        }
        rows.append(row)
    repeat = next((r for r in rows if r["label"] == "native-repeat"), None)
    for row in rows:
        row["flips_over_repeat_pts"] = flips_over(row["flips"], repeat["flips"]) if repeat else math.nan
        if repeat is not None and row is not repeat:
            _against_repeat(row, repeat)
    # A run from before UUIDs were recorded is "unknown" once any run has one:
    # merged with newer runs it may well come from another GPU.
    known = any(r.get("gpu_uuid") for r in runs)
    gpus = {r["setup"]["label"]: r.get("gpu_uuid") or "unknown GPU" for r in runs} if known else {}
    skipped = [r["setup"]["label"] for r in data["runs"] if "skipped" in r]
    errors = {r["setup"]["label"]: r["error"] for r in data["runs"] if "error" in r}
    return {"rows": rows, "skipped": skipped, "errors": errors, "clock_tolerance": clock_tolerance,
            "native_repeat": repeat is not None, "gpus": gpus, "region_bound": bound, "resamples": resamples}
