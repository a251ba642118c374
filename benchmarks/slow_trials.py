"""Which slow trials of a `krex bench` run went with what: joins every trial
(`--suite ... --trial-detail`: its wall-clock start and end and the timing
thread's readings, krex_bench/trial_probe.py) with the setup's trace (other
tenants' commands starting and ending) and a node timeline
(benchmarks/node_timeline.py: GPU processes, memory in use, SM clock and its
sample buffer, throttle reasons).

A trial is slow when it took more than --slow (default 3%) over its own
measurement's fastest trial: the within-measurement signal, no native run
needed. For each condition a trial can meet it prints how many trials met
it, the share of those that were slow against the share of the others, and
the median excess of each; last, the share of slow trials that met any.

Usage: python3 benchmarks/slow_trials.py --results results.json --setup LABEL
       --trace trace.jsonl [--timeline timeline.jsonl] [--slow 0.03]
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

WINDOW_PAD_NS = 20_000_000  # a timeline sample this close to a trial still speaks of it (the sampling period)


def load_trace(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and "type" in e:
            out.append(e)
    return out


class Timeline:
    def __init__(self, path: Path | None) -> None:
        self.samples: list[dict[str, Any]] = []
        self.clk: list[tuple[int, int]] = []  # (wall ns, MHz) from NVML's sample buffer
        self.max_sm = 0
        if path is None:
            return
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["kind"] == "start":
                self.max_sm = r["max_sm_mhz"]
            elif r["kind"] == "s":
                self.samples.append(r)
            elif r["kind"] == "clk":
                self.clk += [(us * 1000, mhz) for us, mhz in r["us_mhz"]]
        self.clk.sort()
        self.t = [s["t"] for s in self.samples]
        self.clk_t = [c[0] for c in self.clk]

    def between(self, a: int, b: int) -> list[dict[str, Any]]:
        i = max(0, bisect.bisect_left(self.t, a - WINDOW_PAD_NS) - 1)  # the state the window began in
        j = bisect.bisect_right(self.t, b + WINDOW_PAD_NS)
        return self.samples[i:j]

    def clocks(self, a: int, b: int) -> list[int]:
        i, j = bisect.bisect_left(self.clk_t, a), bisect.bisect_right(self.clk_t, b)
        return [c[1] for c in self.clk[i:j]]


def conditions(trace: list[dict[str, Any]], tl: Timeline) -> dict[str, Callable[[dict[str, Any]], bool]]:
    started = sorted((int(e["t"] * 1e9), e["id"]) for e in trace if e["type"] == "command_started")
    ended = sorted((int(e["t"] * 1e9), e["id"]) for e in trace if e["type"] == "command_finished")

    def others(events: list[tuple[int, str]], pad_after: int) -> Callable[[dict[str, Any]], bool]:
        ts = [t for t, _ in events]

        def met(tr: dict[str, Any]) -> bool:
            i = bisect.bisect_left(ts, tr["start_ns"])
            j = bisect.bisect_right(ts, tr["end_ns"] + pad_after)
            return any(events[k][1] != tr["command"] for k in range(i, j))
        return met

    def gpu_pids_changed(tr: dict[str, Any]) -> bool:
        s = tl.between(tr["start_ns"], tr["end_ns"])
        return len({tuple(x["pids"] or ()) for x in s}) > 1

    def memory_moved(tr: dict[str, Any]) -> bool:
        s = tl.between(tr["start_ns"], tr["end_ns"])
        return len({x["mem"] >> 26 for x in s}) > 1

    def clock_below(tr: dict[str, Any]) -> bool:
        c = tl.clocks(tr["start_ns"], tr["end_ns"]) + [x["sm"] for x in tl.between(tr["start_ns"], tr["end_ns"])]
        return bool(c) and tl.max_sm > 0 and min(c) < tl.max_sm * 0.97

    def throttled(tr: dict[str, Any]) -> bool:
        return any(x["reasons"] for x in tl.between(tr["start_ns"], tr["end_ns"]))

    found: dict[str, Callable[[dict[str, Any]], bool]] = {
        "timing thread waited >100us for a core": lambda tr: (tr["runq_wait_us"] or 0) > 100,
        "timing thread switched out involuntarily": lambda tr: tr["involuntary"] > 0,
        "timing thread page-faulted": lambda tr: tr["minor_faults"] + tr["major_faults"] > 0,
        "another command started": others(started, 0),
        "another command ended (<=50 ms after)": others(ended, 50_000_000),
    }
    if tl.samples:
        found |= {
            "GPU process list changed": gpu_pids_changed,
            "device memory in use moved >=64 MiB": memory_moved,
            "SM clock below 97% of max": clock_below,
            "a throttle reason": throttled,
        }
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--setup", required=True, help="the setup's label, as the report prints it")
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--timeline", type=Path)
    ap.add_argument("--slow", type=float, default=0.03)
    args = ap.parse_args()
    data = json.loads(args.results.read_text())
    runs = [r for r in data["runs"] if r["setup"]["label"] == args.setup]
    if not runs:
        raise SystemExit(f"no setup {args.setup!r}: {', '.join(r['setup']['label'] for r in data['runs'])}")
    trace = load_trace(args.trace)
    ids = {e["id"]: e for e in trace if e["type"] == "command_queued"}
    by_label = {e["label"]: cid for cid, e in ids.items()}
    trials = []
    for res in runs[-1]["results"]:
        rows = res.get("trials")
        if not rows:
            continue
        fields = res["trial_fields"]
        best = min(r[0] for r in rows)
        key = label_of(res, runs[-1].get("repeats", 1))
        for r in rows:
            tr = dict(zip(fields, r, strict=False))
            tr["excess"] = tr["ms"] / best - 1
            tr["command"] = by_label.get(key, "?")
            trials.append(tr)
    if not trials:
        raise SystemExit("no trial details: run the suite with --trial-detail")
    conds = conditions(trace, Timeline(args.timeline))
    slow = [t for t in trials if t["excess"] > args.slow]
    print(f"{args.setup}: {len(trials)} trials, {len(slow)} slow (> +{args.slow:.0%} over their measurement's fastest)")
    print(f"{'condition':<42} {'trials':>7} {'slow if met':>12} {'slow if not':>12} {'excess met':>11} {'excess not':>11}")
    met_any = set()
    for name, test in conds.items():
        met = [t for t in trials if test(t)]
        not_met = [t for t in trials if not test(t)]
        for t in met:
            if t["excess"] > args.slow:
                met_any.add(id(t))

        def share(ts: list[dict[str, Any]]) -> str:
            return f"{sum(t['excess'] > args.slow for t in ts) / len(ts):.1%}" if ts else "-"

        def med(ts: list[dict[str, Any]]) -> str:
            return f"{statistics.median(t['excess'] for t in ts):+.2%}" if ts else "-"
        print(f"{name:<42} {len(met):>7} {share(met):>12} {share(not_met):>12} {med(met):>11} {med(not_met):>11}")
    print(f"slow trials meeting at least one condition: {len(met_any)}/{len(slow)}")
    by_verdict(runs[-1]["results"], trace, by_label, runs[-1].get("repeats", 1))
    return 0


def label_of(result: dict[str, Any], repeats: int) -> str:
    """The label its command had in the runtime (krex_bench/runner.py command_label)."""
    key = f"{result['problem']}/{result['candidate']}"
    return key if repeats == 1 else f"{key}#{result.get('repeat', 0)}"


def by_verdict(results: list[dict[str, Any]], trace: list[dict[str, Any]], by_label: dict[str, str],
               repeats: int = 1) -> None:
    """Each measurement's spread (median/min - 1) by its region's certificate
    and by what its hold's evidence found: what the certificate calls faithful
    should spread as native does."""
    region_of = {e["region"]: e["command_id"] for e in trace if e["type"] == "region_requested"}
    released = {region_of.get(e["region"]): e for e in trace if e["type"] == "region_released" and e.get("kind") == "region"}
    groups: dict[str, list[float]] = {}
    for res in results:
        e = released.get(by_label.get(label_of(res, repeats), "?")) or {}
        spread = res["median_ms"] / res["min_ms"] - 1
        groups.setdefault(f"verdict {e.get('verdict', '?')}", []).append(spread)
        found = [r for r in e.get("verdict_reasons") or [] if r.split(":", 1)[0] in ("cpu", "tenants")]
        for r in found:
            what = r.split(":", 1)[0]
            if what == "tenants":
                what += " ended" if "ended" in r else ""
                what += " in-driver" if "creating" in r else ""
            groups.setdefault(f"  {what} ({'perturbed' if e.get('verdict') == 'perturbed' else 'note'})", []).append(spread)
        for flag in e.get("exit_flags") or []:
            groups.setdefault(f"  flag {flag.split(':', 1)[0]}", []).append(spread)
    print(f"{'measurements by their region':<34} {'n':>4} {'spread p50':>10} {'p90':>7} {'max':>7}")
    for name, spreads in sorted(groups.items()):
        q = sorted(spreads)
        print(f"{name:<34} {len(q):>4} {statistics.median(q):>+10.2%} {q[int(0.9 * (len(q) - 1))]:>+7.2%} {q[-1]:>+7.2%}")

if __name__ == "__main__":
    raise SystemExit(main())
