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

from rich.console import Console

from krex_bench import report, runner, setups, workload
from krex_bench.arguments import (
    FAILED,
    MAX_REPEATS,
    build_parser,
    gpu_set,
    has_native_runs,
    on_a_set,
    seconds,
    tolerance,
)
from krex_bench.progress import SetupProgress


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
    parser = build_parser(__doc__)
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (through `krex bench` too): answer and exit
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.verb == "list":
        return _list(args)
    if args.verb == "report":
        return _report(args)
    try:
        plan, opts = _plan(args), _options(args)
        runner.commands(opts)  # a bad scale is reported before anything starts
    except ValueError as exc:
        return fail(str(exc), args.json)
    return _run(args, argv, plan, opts)


def _list(args: argparse.Namespace) -> int:
    """`krex bench list`: the problems, their candidates and the krex variants."""
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


def _report(args: argparse.Namespace) -> int:
    """`krex bench report`: the report of results already measured."""
    try:
        data = merged(args.results)
        out = args.out or args.results[0].parent
        written = report.write(data, out, clock_tolerance=tolerance(args.clock_tolerance))
    except (OSError, ValueError, KeyError) as exc:
        return fail(f"no report: {exc}", args.json)
    print(json.dumps({"written": [str(p) for p in written]}) if args.json else "\n".join(str(p) for p in written))
    _say_no_chart(written)
    return 0


def _plan(args: argparse.Namespace) -> list[setups.Setup]:
    """The setups `krex bench run` measures; ValueError for arguments that name none."""
    concurrency = tuple(int(c) for c in args.concurrency.split(",") if c)
    named = {"all": setups.VARIANTS, "none": ()}
    variants = named[args.variants] if args.variants in named else tuple(args.variants.split(","))
    settles: tuple[float | None, ...] = seconds(args.settle_s, "--settle-s") or (None,)
    longs = seconds(args.settle_long_s, "--settle-long-s") or (0.0,)
    gaps: tuple[float | None, ...] = seconds(args.gap_s, "--gap-s") or (None,)
    gpus, gpu_count = gpu_set(args.gpus, args.gpu)
    if gpus or gpu_count > 1:
        variants = on_a_set(variants, args.variants == "all", args.native_mode)
    plan = setups.matrix(
        concurrency, variants, native=args.native, ungated=not args.no_ungated, settles=settles, gaps=gaps,
        settle_longs=longs, canary_too=args.canary_too, native_mode=args.native_mode,
    )
    tolerance(args.clock_tolerance)  # refused now, before any setup starts, not once the report is due
    has_native_runs(args.native, args.merge)
    return plan


def _options(args: argparse.Namespace) -> runner.Options:
    """How `krex bench run` runs the setups; ValueError for a value out of its range."""
    problems = [p for p in args.problems.split(",") if p] or None
    for p in problems or []:
        if p not in workload.BY_NAME:
            raise ValueError(f"unknown problem {p!r}; problems: {', '.join(workload.BY_NAME)}")
    gpus, gpu_count = gpu_set(args.gpus, args.gpu)
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
    return opts


def _run(args: argparse.Namespace, argv: list[str], plan: list[setups.Setup], opts: runner.Options) -> int:
    """`krex bench run` once its arguments hold: measure every setup, then the report."""
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
        written = report.write(data, args.out, clock_tolerance=tolerance(args.clock_tolerance))
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
