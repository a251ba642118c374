"""The evaluation report: markdown tables, the summary as JSON, and a PNG chart."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from krex_bench import analysis, workload
from krex_bench.analysis import BUCKETS, CLOCK_MATCH, MIN_P95_N, bucket_of, summarize
from krex_bench.bootstrap import MIN_CI_N
from krex_bench.ranking import GAP_GROUPS


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:+.{digits}f}%"


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _workload_line(data: dict[str, Any]) -> str:
    """`4 candidates x 3 repeats = 12 commands (scale 0.25)`; merged runs of
    other repeat counts say theirs."""
    n, repeats = len(data["workload"]), data.get("repeats", 1)
    line = f"{n} candidates x {repeats} repeats = {n * repeats} commands" if repeats > 1 else f"{n} commands"
    other = [f"{r['setup']['label']} {r.get('repeats', 1)}" for r in data["runs"]
             if "results" in r and r.get("repeats", 1) != repeats]
    return f"{line} (scale {data['scale']})" + (f"; repeats of merged runs: {', '.join(other)}" if other else "")


def _by_witness(reasons: list[str]) -> str:
    """`clock 3, gate 1`: a reason line starts with its witness's name."""
    counts = Counter(reason.split(":", 1)[0] for reason in reasons)
    return ", ".join(f"{w} {n}" for w, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _with_interval(x: float, ci: list[float], digits: int = 2) -> str:
    """`+3.20% [+1.10, +5.00]`: a fraction as a percentage, its interval in percent beside it."""
    if math.isnan(x):
        return "n/a"
    if any(math.isnan(v) for v in ci):
        return _pct(x, digits)
    return f"{_pct(x, digits)} [{ci[0] * 100:+.{digits}f}, {ci[1] * 100:+.{digits}f}]"


def _percentile_cell(figures: dict[str, Any], name: str) -> str:
    """A percentile and its interval; a tail one over fewer than MIN_P95_N values is not quoted."""
    if name != "p50" and figures["n"] < MIN_P95_N:
        return f"n<{MIN_P95_N}"
    return _with_interval(figures[name], figures["ci"][name])


def _overlaps(figures: dict[str, Any], names: tuple[str, ...]) -> str:
    """`yes / no / n/a`: whether each figure's interval overlaps the repeat's."""
    marks = figures.get("overlaps_repeat") or {}
    return " / ".join({True: "yes", False: "**no**", None: "n/a"}[marks.get(n)] for n in names)


QUOTED = ("p50", "p90", "p95")
FLOOR = "(the floor)"  # the native repeat's own row: what the others are set against


def _inflation_table(rows: list[dict[str, Any]], key: str) -> list[str]:
    """Per bucket, the repeat first, every setup's percentiles with their
    intervals and whether each overlaps the repeat's."""
    shown = sorted((r for r in rows if r["label"] != "native"), key=lambda r: r["label"] != "native-repeat")
    return _table(
        ["bucket", "setup", "n", *[f"{q} [95% CI]" for q in QUOTED], "max", "overlaps the repeat's (p50 / p90 / p95)"],
        [
            [bucket, r["label"], str(r[key][bucket]["n"]), *[_percentile_cell(r[key][bucket], q) for q in QUOTED],
             _pct(r[key][bucket]["max"], 2), FLOOR if r["label"] == "native-repeat" else _overlaps(r[key][bucket], QUOTED)]
            for bucket, _, _ in BUCKETS for r in shown
        ],
    )


def _spread_table(rows: list[dict[str, Any]]) -> list[str]:
    return _table(
        ["setup", "measurements", "p50 [95% CI]", "p90 [95% CI]", "max", "overlaps the repeat's (p50 / p90)"],
        [
            [r["label"], str(r["spread"]["n"]), _percentile_cell(r["spread"], "p50"), _percentile_cell(r["spread"], "p90"),
             _pct(r["spread"]["max"], 2),
             {"native": "", "native-repeat": FLOOR}.get(r["label"]) or _overlaps(r["spread"], ("p50", "p90"))]
            for r in rows
        ],
    )


def _flip_cell(group: dict[str, Any]) -> str:
    """`12% [4, 20] (3/25)`: the rate, its interval in percent, flips/pairs."""
    if not group["pairs"]:
        return f"n/a ({group['flips']}/{group['pairs']})"
    lo, hi = group["ci"]["rate"]
    interval = "" if math.isnan(lo) else f" [{lo * 100:.0f}, {hi * 100:.0f}]"
    return f"{group['rate'] * 100:.0f}%{interval} ({group['flips']}/{group['pairs']})"


def _tau_cell(figures: dict[str, Any] | None) -> str:
    if figures is None or math.isnan(figures["tau"]):
        return "n/a"
    lo, hi = figures["ci"]["tau"]
    return f"{figures['tau']:.2f}" + ("" if math.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]")


def _apart_from_repeat(row: dict[str, Any]) -> str:
    """The gap groups and taus whose interval does not overlap the repeat's."""
    apart = [f"gap {g}" for g, _, _ in GAP_GROUPS if row["flips"][g].get("overlaps_repeat", {}).get("rate") is False]
    apart += [f"tau {p}" for p, t in sorted(row["tau_b"].items()) if t.get("overlaps_repeat", {}).get("tau") is False]
    if row["label"] == "native-repeat":
        return FLOOR
    if "overlaps_repeat" not in row["flips"][GAP_GROUPS[0][0]]:
        return "n/a"
    return ", ".join(apart) or "none"


def _bound_lines(bound: dict[str, float], rows: list[dict[str, Any]]) -> list[str]:
    """The region-serialisation bound, and each setup's share of it."""
    if math.isnan(bound["per_min"]):
        return ["", "Region-serialisation bound: n/a (native's results carry no `timing` phase)."]
    return ["", f"Region-serialisation bound: {bound['per_min']:.1f} cmds/min = 60 s / {bound['mean_region_s']:.3f} s "
            f"(the mean timed region of native's {bound['n']} measurements) x {analysis.GPUS_USED} GPU: the most any "
            "setup can reach while the timed regions of all commands run one after another on the GPU. Of it: "
            + ", ".join(f"{r['label']} {_share(r['vs_region_bound'])}" for r in rows) + "."]


def _share(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x * 100:.0f}%"


def workload_table() -> str:
    """docs/BENCHMARKS.md's table of the workload: every candidate, its native
    time on the H200 and its bucket, and the count per bucket (a test keeps the doc in step)."""
    rows = [
        [c.problem, c.name, ("~" if c.estimated else "") + f"{c.native_ms:g}", bucket_of(c.native_ms)]
        for c in workload.select(1.0)
        if c.native_ms is not None
    ]
    counts = {name: sum(1 for r in rows if r[3] == name) for name, _, _ in BUCKETS}
    lines = _table(["problem", "candidate", "native ms (H200; ~ estimated)", "bucket"], rows)
    lines += ["", "Candidates per bucket: " + ", ".join(f"{name} {n}" for name, n in counts.items())]
    return "\n".join(lines) + "\n"


def _gpus_line(gpus: dict[str, str]) -> list[str]:
    """A warning when the runs were measured on more than one GPU (merged from
    other machine starts): two GPUs of one model differ by more than the
    noise floor, so figures across them include that difference."""
    by_gpu: dict[str, list[str]] = {}
    for label, uuid in gpus.items():
        by_gpu.setdefault(uuid, []).append(label)
    if len(by_gpu) < 2:
        return []
    parts = [f"{uuid}: {', '.join(labels)}" for uuid, labels in by_gpu.items()]
    return ["**Measured on more than one GPU** (figures across them include the GPUs' own difference): "
            + "; ".join(parts), ""]


def markdown(data: dict[str, Any], summary: dict[str, Any]) -> str:
    rows = summary["rows"]
    out = [
        *_heading(data, summary), *_throughput(data, summary), *_inflation(summary), *_steadiness(rows),
        *_spread_and_ranking(rows), *_closing(data, summary),
    ]
    return "\n".join(out) + "\n"


def _heading(data: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """The title, the machine, the workload and the command that measured it."""
    m = data["machine"]
    out = [f"# KREX evaluation, {data['date']}", ""]
    if data["simulated"]:
        out += ["**Simulated GPU: these figures are the simulator's, not a GPU's.**", ""]
    out += [
        f"- Machine: {m.get('host')}, {m.get('gpu')}, driver {m.get('driver', 'n/a')}, {m.get('cpus')} CPUs; "
        f"Python {m.get('python')}, torch {m.get('torch')}, triton {m.get('triton')}",
        f"- Workload: {_workload_line(data)}, submitted at once per setup",
        f"- Command: `{' '.join(data['argv'])}`",
        "",
    ]
    out += _gpus_line(summary.get("gpus") or {})
    return out


def _throughput(data: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """Each setup's throughput, then what its regions and pooled processes met."""
    rows = summary["rows"]
    out = ["## Throughput", ""]
    out += _table(
        ["setup", "ok", "failed", "wall s", "cmds/min", "of native", "of ungated", "of region bound",
         "SM MHz median (min-max)", "pool warm s", "verified regions"],
        [
            [
                r["label"],
                str(r["ok"]),
                str(r["failed"]),
                _num(r["wall_s"]),
                _num(r["throughput_per_min"]),
                _share(r["vs_native"]),
                _share(r["vs_ungated"]),
                _share(r["vs_region_bound"]),
                f"{_num(r['sm_clock_mhz']['median'], '.0f')} ({_num(r['sm_clock_mhz']['min'], '.0f')}-"
                f"{_num(r['sm_clock_mhz']['max'], '.0f')})",
                _num(r["pool_warm_s"]),
                "n/a" if math.isnan(r.get("verified_share", math.nan)) else f"{r['verified_share'] * 100:.0f}%",
            ]
            for r in rows
        ],
    )
    if "region_bound" in summary:
        out += _bound_lines(summary["region_bound"], rows)
    violated = [(run["setup"]["label"], run["violations"]) for run in data["runs"] if run.get("violations")]
    if violated:
        out += ["", "Violated regions, by the witness that says so (the first reasons are in results.json):"]
        out += [f"- {label}: {_by_witness(reasons)}" for label, reasons in violated]
    integrity = [(run["setup"]["label"], run["integrity"]) for run in data["runs"] if (run.get("integrity") or {}).get("regions")]
    if integrity:
        out += ["", "Measurement integrity of the regions' timed windows (docs/integrity.md), per setup:"]
        out += [f"- {label}: {i['flagged']} of {i['regions']} regions flagged"
                + (f" ({', '.join(f'{name} {n}' for name, n in sorted(i['flags'].items()))})" if i["flags"] else "")
                + f", {i['windows']} timed windows" for label, i in integrity]
    retired = [(run["setup"]["label"], run["pool_replaced"]) for run in data["runs"] if run.get("pool_replaced")]
    if retired:
        out += ["", "Pooled context processes replaced after a command, by reason (each costs the next command a fresh process):"]
        out += [f"- {label}: " + ", ".join(f"{n} `{why}`" for why, n in sorted(r.items(), key=lambda x: -x[1]))
                for label, r in retired]
    return out


def _inflation(summary: dict[str, Any]) -> list[str]:
    """Timing inflation against native, raw, clock-matched and unthrottled at the grant."""
    out: list[str] = []
    rows = summary["rows"]
    if not summary.get("native_repeat", True):
        out += ["", "**No native repeat in these results: the noise floor every figure is read against is unknown.**"]
    tolerance = summary.get("clock_tolerance", CLOCK_MATCH)
    out += ["", "## Timing inflation against native (per bucket of the native kernel time)", ""]
    out += [
        f"A candidate's figure is its median of its measurements' medians over native's. A p90 or p95 is quoted "
        f"only over at least {MIN_P95_N} candidates (with fewer it is nearly the maximum): `n<{MIN_P95_N}` instead. "
        f"Beside each percentile its 95% percentile-bootstrap interval ({summary.get('resamples', 0)} draws of the "
        f"candidates with replacement, a fixed seed; quoted from {MIN_CI_N} candidates, for a flip rate "
        f"{MIN_CI_N} pairs), and whether it overlaps the native repeat's interval of the same figure: **no** "
        "is a difference the noise floor does not explain.",
        "",
        "Raw, every candidate:",
        "",
    ]
    out += _inflation_table(rows, "inflation")
    out += [
        "",
        f"Clock-matched: only the measurements whose SM clock was within {tolerance * 100:g}% of the clock of the "
        "candidate's native measurement (the rest differ by power state, not by interference):",
        "",
    ]
    out += _inflation_table(rows, "inflation_matched")
    out += [
        "",
        "Granted unthrottled: only the candidates whose regions were granted with no throttle reason (a power cap "
        "left by the drained tenants' work, `throttled:...` in the region's flags; runs without regions keep all):",
        "",
    ]
    out += _inflation_table(rows, "inflation_unthrottled")
    out += ["", "Unthrottled at the grant: " + ", ".join(
        f"{r['label']} {r['unthrottled']['n']}/{r['unthrottled']['of']}" for r in rows if r["setup"]["kind"] == "krex"
    )]  # fmt: skip
    if any(r.get("host_paced", {}).get("known") for r in rows):
        out += ["", "By what paced the timed windows (the region's `integrity.timing.host_paced`, docs/integrity.md): "
                "host-paced, the measurements whose windows the host paced for the most part (the GPU waited on its "
                "launches, so host load moves them), then issued ahead, the rest:", ""]
        out += _inflation_table(rows, "inflation_host_paced")
        out += [""]
        out += _inflation_table(rows, "inflation_issued_ahead")
        out += ["", "Host-paced measurements: " + ", ".join(
            f"{r['label']} {r['host_paced']['n']}/{r['host_paced']['known']}" for r in rows if r["host_paced"]["known"]
        )]  # fmt: skip
    out += ["", "Clock-matched measurements (and regions whose own flags say off-clock, at the grant or the "
            "release): " + ", ".join(
        f"{r['label']} {r['clock_matched']['n']}/{r['clock_matched']['of']} ({r.get('off_clock', 0)})"
        for r in rows if r["label"] != "native"
    )]  # fmt: skip
    return out


def _steadiness(rows: list[dict[str, Any]]) -> list[str]:
    """Kernels that ran slower over part of their measurement, and the throttles seen meanwhile."""
    out: list[str] = []
    if any(r.get("unsteady", {}).get("of") for r in rows):  # results from before placements have none
        out += ["", f"Unsteady: kernels of 1 ms or more whose placements' medians lie more than "
                f"{analysis.UNSTEADY_SPREAD:.0%} apart, so the kernel ran slower over part of its measurement "
                "(power-capped bf16 GEMMs do so natively too): " + ", ".join(
            f"{r['label']} {r['unsteady']['n']}/{r['unsteady']['of']}{_causes(r['unsteady'])}"
            for r in rows if r.get("unsteady")
        )]  # fmt: skip
        if any(_watched(r.get("unsteady") or {}) for r in rows):
            out += ["", "What the clock watch saw over the slow placements: *power state*, a power or thermal "
                    "throttle reason; *lower clock*, a lower SM clock than the other placements' without one; "
                    "*same clock*, neither: the kernel ran slower at the same clock, which a power state does "
                    "not explain."]
    watched = [r for r in rows if r.get("throttled_during")]
    if watched:
        out += ["", "A power-state throttle reason seen while the repeats ran (`--watch-clock-ms`): " + ", ".join(
            f"{r['label']} {r['throttled_during']['n']}/{r['throttled_during']['of']}" for r in watched
        )]  # fmt: skip
    return out


def _spread_and_ranking(rows: list[dict[str, Any]]) -> list[str]:
    """The spread within measurements and the ranking against native."""
    out: list[str] = []
    out += ["", "## Within-measurement spread (each measurement's median / its fastest repeat - 1; needs no native)", ""]
    out += ["A kernel slowed over part of a measurement's repeats pulls its median away from its fastest repeat. "
            "Intervals as above, drawing candidates with all their measurements.", ""]
    out += _spread_table(rows)
    out += ["", "## Ranking against native: flip rate by native gap [95% CI] (flips/pairs), Kendall tau-b per problem "
            "[95% CI]", ""]
    problems = sorted({p for r in rows for p in r["tau_b"]})
    out += _table(
        ["setup", *[f"gap {name}" for name, _, _ in GAP_GROUPS], "worst vs repeat", *[f"tau {p}" for p in problems],
         "no overlap with the repeat's"],
        [
            [r["label"]]
            + [_flip_cell(r["flips"][g]) for g, _, _ in GAP_GROUPS]
            + [_num(r["flips_over_repeat_pts"], "+.0f") + (" pts" if not math.isnan(r["flips_over_repeat_pts"]) else "")]
            + [_tau_cell(r["tau_b"].get(p)) for p in problems]
            + [_apart_from_repeat(r)]
            for r in rows
            if r["label"] != "native"
        ],
    )
    repeat = next((r for r in rows if r["label"] == "native-repeat"), None)
    if repeat is not None:
        # A group of n pairs resolves the flip rate only in steps of 100/n points:
        # an excess over the repeat below one step is not a measurable difference.
        steps = [f"gap {g} {100 / repeat['flips'][g]['pairs']:.1f}" for g, _, _ in GAP_GROUPS
                 if repeat["flips"][g]["pairs"]]
        out += ["", "One flip moves a group's rate by (points): " + ", ".join(steps) + "."]
    return out


def _closing(data: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """Where a native command's time goes, what was skipped or failed."""
    out: list[str] = []
    rows = summary["rows"]
    native = next(r for r in rows if r["label"] == "native")
    if native["phase_shares"]:
        out += ["", "## Where a native command's time goes", ""]
        out += _table(
            list(native["phase_shares"]), [[f"{v * 100:.1f}%" for v in native["phase_shares"].values()]]
        )
    if summary["skipped"]:
        out += ["", f"Skipped (time budget): {', '.join(summary['skipped'])}"]
    for label, error in summary["errors"].items():
        out += ["", f"Error in {label}: {error}"]
    failures = [(run["setup"]["label"], f) for run in data["runs"] for f in run.get("failures", [])]
    if failures:
        out += ["", "## Failed commands", ""]
        out += [f"- {label}: {f['key']} {f['state']} exit {f['exit_code']} {f['reason'] or ''}".rstrip() for label, f in failures]
    return out


NO_CHART = "no PNG chart: matplotlib is not installed (pip install 'krex-runtime[bench]'); the markdown and JSON are complete"


def chart(summary: dict[str, Any], path: Path, title: str) -> bool:
    """A PNG of throughput and p95 inflation per setup; False where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in summary["rows"] if r["label"] != "native-repeat"]
    labels = [r["label"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8, 0.55 * len(rows)), 9), constrained_layout=True)
    colors = ["#555555" if r["setup"]["kind"] == "native" else "#d62728" if r["setup"]["kind"] == "ungated" else "#1f77b4" for r in rows]
    top.bar(range(len(rows)), [r["vs_native"] for r in rows], color=colors)
    top.axhline(1.0, color="black", linewidth=0.8)
    top.set_ylabel("throughput / native")
    top.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=8)
    top.set_title(title)
    width = 0.8 / len(BUCKETS)
    for i, (bucket, _, _) in enumerate(BUCKETS):
        values = [r["inflation"][bucket]["p95"] * 100 for r in rows]  # nan (no bar) below MIN_P95_N
        bottom.bar([x + i * width for x in range(len(rows))], values, width=width, label=bucket)
    bottom.axhline(0.0, color="black", linewidth=0.8)
    bottom.set_ylabel("p95 timing inflation vs native (%)")
    bottom.set_yscale("symlog", linthresh=1.0)
    bottom.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], labels, rotation=60, ha="right", fontsize=8)
    bottom.legend(title="native kernel time", fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(data: dict[str, Any], out_dir: Path, stem: str = "report", clock_tolerance: float = CLOCK_MATCH) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(data, clock_tolerance)
    md = out_dir / f"{stem}.md"
    md.write_text(markdown(data, summary))
    js = out_dir / f"{stem}.json"
    js.write_text(json.dumps({"date": data["date"], "machine": data["machine"], "simulated": data["simulated"], **summary}, indent=1))
    written = [md, js]
    png = out_dir / f"{stem}.png"
    kind = "simulated GPU" if data["simulated"] else data["machine"].get("gpu", "GPU")
    if chart(summary, png, f"KREX evaluation, {kind}, {data['date']}"):
        written.append(png)
    return written


def _causes(unsteady: dict[str, Any]) -> str:
    """The unsteady measurements by cause, as in "krex c4 3/20 (power state 2,
    same clock 1)"; nothing where no slow placement was watched."""
    if not _watched(unsteady):
        return ""
    return " (" + ", ".join(f"{cause} {n}" for cause, n in sorted(unsteady["causes"].items())) + ")"


def _watched(unsteady: dict[str, Any]) -> bool:
    """Some unsteady measurement's slow placements were seen by the clock watch."""
    return bool(set(unsteady.get("causes") or {}) - {"unwatched"})
