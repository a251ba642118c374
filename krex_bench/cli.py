# PYTHON_ARGCOMPLETE_OK
"""`krex bench` (the program krex-bench, which `krex bench` runs): run the
evaluation, or report on results already measured.

    krex bench run [--scale S] [--repeats N] [--concurrency 4,8,16] [--variants ...] [--budget-s N] [--out DIR] [--sim]
                   [--gpu I | --gpus N|I,J]
    krex bench report RESULTS.json [--out DIR] [--clock-tolerance F]
    krex bench list [--markdown]

Every run measures native and its repeat (the noise floor) first; `--native
0` skips both only to `--merge` them from an earlier run that has them, and
`--native native` / `--native repeat` measure one each, so that both fit a
time limit per invocation (the second merges the first).

Every subcommand takes `--json`: one JSON document on stdout (progress and
the setups' lines go to stderr then). Exit status as for every `krex`
subcommand: 0 when it did what it was asked, 125 for any failure (a usage
error, a bad argument, a setup whose commands failed, no report).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from krex_bench import analysis, report, runner, setups, workload
from krex_bench.progress import SetupProgress

FAILED = 125  # the krex exit status of every KREX failure (README, "Exit status of krex")
MAX_REPEATS = 100
CLOCK_HELP = (
    "a measurement is clock-matched when its SM clock is within this fraction of the native measurement's "
    f"(default {analysis.CLOCK_MATCH:g})"
)


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors exiting 125 like every krex failure (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(FAILED, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="krex bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    js = Parser(add_help=False)
    js.add_argument("--json", action="store_true", help="one JSON document on stdout (progress on stderr)")
    run = sub.add_parser("run", parents=[js], help="run the workload under every setup, then write the report")
    run.add_argument("--gpu", type=int, default=None, help="GPU index to run on (default 0)")
    run.add_argument(
        "--gpus", metavar="N|I,J", default=None,
        help="run each command on a set of GPUs, as `krex run --gpus` does: N of them or these indices (0,1); "
        "its regions cover the whole set. Process mode only: the krex variants in process mode "
        "(`all`: those), native in process mode; with --sim, that many simulated GPUs",
    )  # fmt: skip
    run.add_argument("--sim", action="store_true",
                     help="simulated GPUs (one, or those --gpus names) and simulated candidates (no torch)")
    run.add_argument("--scale", type=float, default=1.0, help="share of each problem's candidates, in (0, 1]")
    run.add_argument(
        "--suite", type=Path, default=None,
        help="a folder of problems in KernelBench's format (a Model, get_inputs and get_init_inputs per file; your own "
        "checkout, e.g. KernelBench/level1) to run instead of the built-in workload (krex_bench/suite.py)",
    )  # fmt: skip
    run.add_argument("--suite-problems", default="", help="comma-separated stems or their leading numbers (default: all)")
    run.add_argument("--suite-trials", type=int, default=30, help="timed trials per suite command (default 30)")
    run.add_argument("--trial-detail", action="store_true",
                     help="suite commands record every trial and its timing thread's readings (benchmarks/slow_trials.py reads them)")
    run.add_argument(
        "--repeats", type=int, default=1,
        help="measurements of each candidate per setup (default 1); submitted in interleaved rounds, the same order "
        "for every setup; the figures take each candidate's median of its measurements' medians",
    )  # fmt: skip
    run.add_argument("--problems", default="", help="comma-separated problems (default: all; see `krex bench list`)")
    run.add_argument("--concurrency", default="4,8,16", help="comma-separated concurrencies (default 4,8,16)")
    run.add_argument(
        "--variants",
        default="all",
        help="krex variants BACKEND/MODE/PROTECTION, comma-separated, or `all` or `none` (default all)",
    )
    run.add_argument(
        "--native", choices=tuple(setups.NATIVE_RUNS), default="2",
        help="2: native and its repeat (default); native: native only; repeat: the repeat only, native merged "
        "from --merge; 0: neither, merged from --merge results that have both",
    )  # fmt: skip
    run.add_argument(
        "--native-mode", choices=("process", "pooled"), default="process",
        help="how native runs each command, one at a time with the GPU alone: process (a fresh process each, as a "
        "user runs it alone; default) or pooled (in a warm process that imported torch once: the same timer and "
        "kernels without the start-up, for a native run in a fifth of the time)",
    )  # fmt: skip
    run.add_argument("--no-ungated", action="store_true", help="skip the ungated setups")
    run.add_argument("--merge", type=Path, help="add these results' runs (e.g. an earlier native run) to this one; a setup run again here replaces its earlier run")
    run.add_argument(
        "--budget-s", type=float, default=0.0, help="start no setup after this many seconds (native and its repeat always run)"
    )
    run.add_argument(
        "--settle-s", default="",
        help="comma-separated values of regions.settle_max_s (how long an entry may wait for the power state the "
        "drained tenants left to clear); each krex variant runs once per value (default: once, with the runtime's "
        "default)",
    )  # fmt: skip
    run.add_argument("--canary-too", action="store_true",
                     help="each krex variant runs once more with telemetry.canary on (off by default)")
    run.add_argument(
        "--settle-long-s", default="0",
        help="comma-separated; krex setups: candidates whose kernel takes at least 5 ms ask their own region to "
        "settle up to this long (region(settle_s=...); at most the runtime's regions.settle_cap_s, 1 s); each krex "
        "variant runs once per value (default 0: none asks, the runtime settles where the grant shows a power state, "
        "regions.settle_max_s; 0,0.5: both)",
    )  # fmt: skip
    run.add_argument(
        "--gap-s", default="",
        help="comma-separated values of regions.gap_s; each krex variant runs once per value "
        "(default: once, with the runtime's default)",
    )  # fmt: skip
    run.add_argument("--clock-tolerance", type=float, default=analysis.CLOCK_MATCH, help=CLOCK_HELP)
    run.add_argument(
        "--watch-clock-ms", type=int, default=0,
        help="every command (native too) samples the SM clock, throttle reasons, power and temperature this often "
        "while its repeats run; its result says the lowest clock, the reasons seen, the highest power and the "
        "temperature's range (krex_bench/clock_watch.py; default 0: off)",
    )  # fmt: skip
    run.add_argument("--seed", type=int, default=1, help="submission order")
    run.add_argument("--out", type=Path, default=Path("bench-results"), help="folder for results.json and the report")
    run.add_argument("--work-dir", type=Path, default=Path("/tmp/krex-bench"), help="runtimes' folders")
    run.add_argument("--keep", action="store_true", help="keep each setup's run folder (traces, output)")
    rep = sub.add_parser("report", parents=[js], help="write the report (markdown, JSON, PNG) for results.json files")
    rep.add_argument("results", type=Path, nargs="+", help="results.json; several are merged, a later file's run of a setup replacing an earlier one's (one native run needed)")
    rep.add_argument("--out", type=Path, default=None, help="folder (default: beside the first results file)")
    rep.add_argument("--clock-tolerance", type=float, default=analysis.CLOCK_MATCH, help=CLOCK_HELP)
    listing = sub.add_parser("list", parents=[js], help="list the problems, their candidates and the krex variants")
    listing.add_argument("--markdown", action="store_true", help="the candidates' native times and buckets, as a table")
    return p


def combine(earlier: list[dict], later: list[dict]) -> list[dict]:
    """Runs of both, where a later run of a setup replaces an earlier run of
    the same setup (its label): a report has one row per setup, and the setup
    measured again is the one asked for (e.g. `--merge` of an earlier run
    that has the same krex setups as this one)."""
    again = {r["setup"]["label"] for r in later}
    return [r for r in earlier if r["setup"]["label"] not in again] + later


def merged(paths: list[Path]) -> dict:
    data = json.loads(paths[0].read_text())
    for path in paths[1:]:
        more = json.loads(path.read_text())
        if more["workload"] != data["workload"] and set(more["workload"]) != set(data["workload"]):
            raise SystemExit(f"krex bench: {path} ran another workload than {paths[0]}; results cannot be merged")
        data["runs"] = combine(data["runs"], more["runs"])
    return data


def _tolerance(value: float) -> float:
    if not 0 < value < 1:
        raise ValueError(f"--clock-tolerance must be in (0, 1), got {value:g}")
    return value


def _seconds(text: str, flag: str) -> tuple[float, ...]:
    """A comma-separated list of seconds, each within [0, 1] (one setup per value)."""
    values = tuple(float(v) for v in text.split(",") if v)
    if any(not 0 <= v <= 1 for v in values):
        raise ValueError(f"{flag} values must be within [0, 1] seconds, got {text}")
    return values


def gpu_set(text: str | None, gpu: int | None) -> tuple[tuple[int, ...], int]:
    """--gpus N (how many) or --gpus I,J (which), as `krex run --gpus` takes
    it: (indices, count); ((), 0) without it."""
    if text is None:
        return (), 0
    if gpu is not None:
        raise ValueError("give --gpu (one GPU) or --gpus (a set), not both")
    words = [w.strip() for w in text.split(",")]
    if not all(w.isascii() and w.isdigit() for w in words):
        raise ValueError(f"--gpus takes a number of GPUs (2) or GPU indices (0,1), not {text!r}")
    if len(words) == 1:
        if int(words[0]) < 1:
            raise ValueError(f"--gpus takes at least 1 GPU, not {text!r}")
        return (), int(words[0])
    indices = tuple(int(w) for w in words)
    if len(set(indices)) != len(indices):
        raise ValueError(f"--gpus names a GPU twice: {text}")
    return tuple(sorted(indices)), len(indices)


def on_a_set(variants: tuple[str, ...], every: bool, native_mode: str) -> tuple[str, ...]:
    """The krex variants a command on a set of GPUs runs in: process mode only
    (a zygote or a context process is one GPU's). `all` takes those; one named
    in another mode is refused, and so is native in pooled mode."""
    if native_mode != "process":
        raise ValueError(f"--gpus runs native in process mode, not --native-mode {native_mode} "
                         "(a context process is one GPU's)")
    if every:
        return tuple(v for v in variants if setups.parse_variant(v)[1] == "process")
    other = [v for v in variants if setups.parse_variant(v)[1] != "process"]
    if other:
        raise ValueError(f"--gpus runs each command on a set of GPUs, in process mode only: not {', '.join(other)} "
                         "(a zygote or a context process is one GPU's)")
    return variants


def _has_native_runs(native: str, merge: Path | None) -> None:
    """The native runs this invocation does not measure must come from --merge
    (the native one at least: everything is compared with it)."""
    needed = [k for k in ("native", "native-repeat") if k not in setups.NATIVE_RUNS[native]]
    if native == "native" or not needed:
        return
    if merge is None:
        raise ValueError(f"--native {native} needs --merge RESULTS.json with the {' and '.join(needed)} run")
    try:
        labels = {r["setup"]["label"] for r in json.loads(merge.read_text())["runs"] if "results" in r}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--merge {merge}: cannot read its runs ({exc})") from None
    missing = [label for label in needed if label not in labels]
    if missing:
        raise ValueError(f"--native {native}: {merge} has no {' and no '.join(missing)} run to merge")


def _say_no_chart(written: list[Path]) -> None:
    """The report promises a PNG: where it could not draw one, say so (stderr, one line)."""
    if not any(p.suffix == ".png" for p in written):
        print(f"krex bench: {report.NO_CHART}", file=sys.stderr)


def fail(message: str, as_json: bool) -> int:
    print(f"krex bench: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": {"code": "bench", "reason": message}}))
    return FAILED


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (through `krex bench` too): answer and exit
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.verb == "list":
        if args.markdown:
            print(report.workload_table(), end="")
            return 0
        if args.json:
            print(json.dumps({
                "problems": [
                    {"name": p.name, "summary": p.summary, "repeats": p.repeats, "candidates": [c.name for c in p.candidates]}
                    for p in workload.PROBLEMS
                ],
                "variants": list(setups.VARIANTS),
            }))  # fmt: skip
            return 0
        for problem in workload.PROBLEMS:
            print(f"{problem.name}: {problem.summary} ({problem.repeats} repeats)")
            print("  " + " ".join(c.name for c in problem.candidates))
        print("krex variants: " + " ".join(setups.VARIANTS))
        return 0
    if args.verb == "report":
        try:
            data = merged(args.results)
            out = args.out or args.results[0].parent
            written = report.write(data, out, clock_tolerance=_tolerance(args.clock_tolerance))
        except (OSError, ValueError, KeyError) as exc:
            return fail(f"no report: {exc}", args.json)
        print(json.dumps({"written": [str(p) for p in written]}) if args.json else "\n".join(str(p) for p in written))
        _say_no_chart(written)
        return 0
    try:
        concurrency = tuple(int(c) for c in args.concurrency.split(",") if c)
        named = {"all": setups.VARIANTS, "none": ()}
        variants = named[args.variants] if args.variants in named else tuple(args.variants.split(","))
        settles: tuple[float | None, ...] = _seconds(args.settle_s, "--settle-s") or (None,)
        longs = _seconds(args.settle_long_s, "--settle-long-s") or (0.0,)
        gaps: tuple[float | None, ...] = _seconds(args.gap_s, "--gap-s") or (None,)
        gpus, gpu_count = gpu_set(args.gpus, args.gpu)
        if gpus or gpu_count > 1:
            variants = on_a_set(variants, args.variants == "all", args.native_mode)
        plan = setups.matrix(
            concurrency, variants, native=args.native, ungated=not args.no_ungated, settles=settles, gaps=gaps,
            settle_longs=longs, canary_too=args.canary_too, native_mode=args.native_mode,
        )
        tolerance = _tolerance(args.clock_tolerance)
        _has_native_runs(args.native, args.merge)
        problems = [p for p in args.problems.split(",") if p] or None
        for p in problems or []:
            if p not in workload.BY_NAME:
                raise ValueError(f"unknown problem {p!r}; problems: {', '.join(workload.BY_NAME)}")
        opts = runner.Options(
            gpu=args.gpu or 0, gpus=gpus, gpu_count=gpu_count, sim=args.sim, scale=args.scale, problems=problems,
            seed=args.seed,
            budget_s=args.budget_s, keep=args.keep, root=args.work_dir, watch_clock_ms=args.watch_clock_ms,
            suite=args.suite, suite_problems=[p for p in args.suite_problems.split(",") if p] or None,
            suite_trials=args.suite_trials, trial_detail=args.trial_detail, repeats=args.repeats,
        )  # fmt: skip
        if not 1 <= args.repeats <= MAX_REPEATS:
            raise ValueError(f"--repeats must be between 1 and {MAX_REPEATS}, got {args.repeats}")
        if not 1 <= args.suite_trials <= 10_000:
            raise ValueError(f"--suite-trials must be between 1 and 10000, got {args.suite_trials}")
        if not 0 <= args.watch_clock_ms <= 1000:
            raise ValueError(f"--watch-clock-ms must be between 0 (off) and 1000, got {args.watch_clock_ms}")
        runner.commands(opts)  # a bad scale is reported before anything starts
    except ValueError as exc:
        return fail(str(exc), args.json)
    results = args.out / "results.json"
    # With --json, stdout carries only the document: the lines and the bar go to stderr.
    console = Console(stderr=args.json)
    console.print(f"krex bench: {len(plan)} setups x {len(runner.submissions(opts))} commands; results in {results}",
                  markup=False, highlight=False, soft_wrap=True)
    with SetupProgress(console) as meter:  # a bar per setup while its commands run; the lines as before
        data = runner.run(plan, opts, results, progress=meter.line, argv=["krex", "bench", *argv], meter=meter)
    if data.get("stopped"):
        return fail(f"stopped: a setup's runtime did not start: {data['stopped']} (no report; "
                    f"`krex bench run --sim` runs on a simulated GPU; results in {results})", args.json)
    if args.merge:
        data["runs"] = combine(json.loads(args.merge.read_text())["runs"], data["runs"])
        results.write_text(json.dumps(data, indent=1))
    try:
        written = report.write(data, args.out, clock_tolerance=tolerance)
    except ValueError as exc:  # e.g. no native run to compare with
        return fail(f"results kept in {results}; no report: {exc}", args.json)
    failed = any("error" in r or r.get("failures") for r in data["runs"])
    _say_no_chart(written)
    if args.json:
        summary = json.loads(Path(written[1]).read_text())
        print(json.dumps({"results": str(results), "written": [str(p) for p in written], "failed": failed, **summary}))
    else:
        print(Path(written[0]).read_text())
    if failed:
        print("krex bench: some setups had failed commands (see the report)", file=sys.stderr)
        return FAILED
    return 0

if __name__ == "__main__":
    sys.exit(main())
