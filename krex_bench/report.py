"""The evaluation report: markdown tables, the summary as JSON, and a PNG chart."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from krex_bench import analysis, workload
from krex_bench.analysis import BUCKETS, CLOCK_MATCH, GAP_GROUPS, MIN_P95_N, bucket_of, summarize


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:+.{digits}f}%"


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _by_witness(reasons: list[str]) -> str:
    """`clock 3, gate 1`: a reason line starts with its witness's name."""
    counts = Counter(reason.split(":", 1)[0] for reason in reasons)
    return ", ".join(f"{w} {n}" for w, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _bucket_cell(b: dict[str, Any]) -> str:
    """p50 / p95 (n); a p95 over fewer than MIN_P95_N candidates is not quoted."""
    p95 = _pct(b["p95"], 2) if b["n"] >= MIN_P95_N else f"n<{MIN_P95_N}"
    return f"{_pct(b['p50'], 2)} / {p95} ({b['n']})"


def _inflation_table(rows: list[dict[str, Any]], key: str) -> list[str]:
    return _table(
        ["setup", *[f"{name} (n)" for name, _, _ in BUCKETS]],
        [[r["label"]] + [_bucket_cell(r[key][b]) for b, _, _ in BUCKETS] for r in rows if r["label"] != "native"],
    )


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
    m = data["machine"]
    out = [f"# KREX evaluation, {data['date']}", ""]
    if data["simulated"]:
        out += ["**Simulated GPU: these figures are the simulator's, not a GPU's.**", ""]
    out += [
        f"- Machine: {m.get('host')}, {m.get('gpu')}, driver {m.get('driver', 'n/a')}, {m.get('cpus')} CPUs; "
        f"Python {m.get('python')}, torch {m.get('torch')}, triton {m.get('triton')}",
        f"- Workload: {len(data['workload'])} commands (scale {data['scale']}), submitted at once per setup",
        f"- Command: `{' '.join(data['argv'])}`",
        "",
    ]
    out += _gpus_line(summary.get("gpus") or {})
    out += [
        "## Throughput",
        "",
    ]
    rows = summary["rows"]
    out += _table(
        ["setup", "ok", "failed", "wall s", "cmds/min", "x native", "of ungated", "SM MHz median (min-max)", "pool warm s",
         "verified regions"],
        [
            [
                r["label"],
                str(r["ok"]),
                str(r["failed"]),
                _num(r["wall_s"]),
                _num(r["throughput_per_min"]),
                _num(r["vs_native"], ".2f"),
                "n/a" if math.isnan(r["vs_ungated"]) else f"{r['vs_ungated'] * 100:.0f}%",
                f"{_num(r['sm_clock_mhz']['median'], '.0f')} ({_num(r['sm_clock_mhz']['min'], '.0f')}-"
                f"{_num(r['sm_clock_mhz']['max'], '.0f')})",
                _num(r["pool_warm_s"]),
                "n/a" if math.isnan(r.get("verified_share", math.nan)) else f"{r['verified_share'] * 100:.0f}%",
            ]
            for r in rows
        ],
    )
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
    if not summary.get("native_repeat", True):
        out += ["", "**No native repeat in these results: the noise floor every figure is read against is unknown.**"]
    tolerance = summary.get("clock_tolerance", CLOCK_MATCH)
    out += ["", "## Timing inflation against native (p50 / p95 (n), per bucket of the native kernel time)", ""]
    out += [
        f"A p95 is quoted only over at least {MIN_P95_N} candidates (with fewer it is nearly the maximum): "
        f"`n<{MIN_P95_N}` instead.",
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
    out += ["", "Clock-matched measurements (and regions whose own flags say off-clock, at the grant or the "
            "release): " + ", ".join(
        f"{r['label']} {r['clock_matched']['n']}/{r['clock_matched']['of']} ({r.get('off_clock', 0)})"
        for r in rows if r["label"] != "native"
    )]  # fmt: skip
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
    out += ["", "## Ranking against native: flip rate by native gap (flips/pairs), Kendall tau-b per problem", ""]
    problems = sorted({p for r in rows for p in r["tau_b"]})
    out += _table(
        ["setup", *[f"gap {name}" for name, _, _ in GAP_GROUPS], "worst vs repeat", *[f"tau {p}" for p in problems]],
        [
            [r["label"]]
            + [
                (f"{r['flips'][g]['rate'] * 100:.0f}% " if r["flips"][g]["pairs"] else "n/a ")
                + f"({r['flips'][g]['flips']}/{r['flips'][g]['pairs']})"
                for g, _, _ in GAP_GROUPS
            ]
            + [_num(r["flips_over_repeat_pts"], "+.0f") + (" pts" if not math.isnan(r["flips_over_repeat_pts"]) else "")]
            + [_num(r["tau_b"].get(p), ".2f") for p in problems]
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
    return "\n".join(out) + "\n"


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
