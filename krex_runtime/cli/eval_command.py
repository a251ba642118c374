"""`krex eval`: a candidate kernel against its problem (docs/evaluation.md,
"krex eval"), one pair or a batch, over the Python API's `evaluate` and
`evaluate_many` (api/evaluate.py).

One pair prints its result and exits 0 when the candidate is correct and the
result trusted, 1 otherwise (incorrect, a failure, or untrusted times: the
lines say which). A batch shows its progress (a bar on a terminal, a line per
result otherwise, on stderr), appends each result to `--out` as it ends, and
prints the summary; it exits 0 once every pair has a result (a candidate's
failure is a result), 128+2 after Ctrl-C, which cancels the commands in
flight and leaves the results file whole for `--resume`. A usage error (a
folder that is not there, a candidate of no problem, no pairs) is one line
and 125, as for every subcommand.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from krex_runtime.api.evaluate import EvalOptions
from krex_runtime.api.sync import Client
from krex_runtime.cli import eval_suite
from krex_runtime.cli.subcommands import UsageError, emit_json, fail
from krex_runtime.wire.evaluation import FLAG_SPEEDUP, Evaluation, EvaluationError, summarize
from krex_runtime.wire.printable import printable
from krex_runtime.wire.protocol.bodies import submit_modes
from krex_runtime.wire.protocol.envelope import EXIT_SIGNAL_BASE

# A candidate that hangs would hold its slot for ever: an evaluation has a limit unless told otherwise.
DEFAULT_TIMEOUT_S = 600.0
EXIT_NOT_TRUSTED = 1


def add_parser(sub: Any, js: list[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser(
        "eval", parents=js,
        help="evaluate a candidate kernel against its problem (KernelBench files), or a batch of them: "
             "correctness, times from below, speedup, whether the result is trusted",
        epilog="exit status: one pair: 0 correct and trusted, 1 not (the lines say why); a batch: 0 once every "
               "pair has a result; 125 a usage error or KREX failure; 130 interrupted (Ctrl-C cancels what runs)",
    )
    sp.add_argument("problem", nargs="?", help="the problem file (Model, get_inputs, get_init_inputs)")
    sp.add_argument("candidate", nargs="?", help="the candidate file (ModelNew)")
    batch = sp.add_argument_group("a batch")
    batch.add_argument("--suite", metavar="DIR", help="a folder of problem files")
    batch.add_argument("--candidates", metavar="DIR",
                       help="a folder of candidates, named after their problems (19_ReLU.py, 19_ReLU.v2.py, 19_ReLU/*.py)")
    batch.add_argument("--out", metavar="FILE", help="append each result to this JSON-lines file as it ends")
    batch.add_argument("--resume", action="store_true",
                       help="go on with --out: skip the pairs it has (same files by sha256, same options)")
    batch.add_argument("--batch", metavar="NAME", help="the labels' batch name (default: the candidates' folder name)")
    batch.add_argument("-c", "--max-in-flight", type=int, default=8, metavar="N",
                       help="evaluations submitted at a time (default 8)")
    harness = sp.add_argument_group("the harness")
    defaults = EvalOptions()
    harness.add_argument("--inputs", type=int, default=defaults.inputs, metavar="N", help="seeded input sets checked (default 5)")
    harness.add_argument("--atol", type=float, default=defaults.atol, metavar="F", help="absolute tolerance (default 1e-2)")
    harness.add_argument("--rtol", type=float, default=defaults.rtol, metavar="F", help="relative tolerance (default 1e-2)")
    harness.add_argument("--dtype", default=defaults.dtype, metavar="D", help="the inputs' dtype (default float32)")
    harness.add_argument("--trials", type=int, default=defaults.trials, metavar="N", help="timed trials each (default 100)")
    harness.add_argument("--warmup", type=int, default=defaults.warmup, metavar="N", help="untimed runs first (default 10)")
    harness.add_argument("--seed", type=int, default=defaults.seed, metavar="N", help="the inputs' seed (default 42)")
    harness.add_argument("--flag-speedup", type=float, default=FLAG_SPEEDUP, metavar="X",
                         help="a speedup over X asks for review (default 10)")
    harness.add_argument("--python", default=sys.executable, metavar="PY",
                         help="the interpreter that runs the harness (default: krex's own)")
    harness.add_argument("--harness", metavar="CMD",
                         help="a command that runs a harness of your own in place of PY -m krex_runtime.eval.harness")
    where = sp.add_argument_group("where it runs")
    where.add_argument("--gpu", type=int, metavar="N", help="run on this GPU index (default: the least-loaded)")
    where.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                       help=f"each evaluation's wall-time limit (default {DEFAULT_TIMEOUT_S:g}; then failure timeout)")
    where.add_argument("--mode", choices=submit_modes(), default=None, help="how it runs (default: the runtime's)")
    where.add_argument("--share", default="", metavar="KEY", help="fair-share key")


def check_usage(args: argparse.Namespace) -> None:
    """What argparse cannot see, before any runtime is asked."""
    batch = args.suite is not None or args.candidates is not None
    if batch and (args.problem or args.candidate):
        raise UsageError("give PROBLEM CANDIDATE, or --suite DIR --candidates DIR, not both")
    if not batch:
        if not (args.problem and args.candidate):
            raise UsageError("nothing to evaluate (krex eval PROBLEM CANDIDATE, or --suite DIR --candidates DIR)")
        for what in ("problem", "candidate"):
            if not Path(getattr(args, what)).is_file():
                raise UsageError(f"no {what} file {getattr(args, what)}")
        if args.out or args.resume:
            raise UsageError("--out and --resume are a batch's (--suite DIR --candidates DIR)")
    else:
        if args.suite is None or args.candidates is None:
            raise UsageError("a batch takes both --suite DIR and --candidates DIR")
        if args.resume and not args.out:
            raise UsageError("--resume goes on with a results file: give it with --out FILE")
        if args.out and not args.resume and Path(args.out).exists():
            raise UsageError(f"--out {args.out} exists: --resume to go on with it, or name another file")
        if args.out and not Path(args.out).absolute().parent.is_dir():
            raise UsageError(f"--out {args.out}: no such folder")
        if args.max_in_flight < 1:
            raise UsageError("--max-in-flight must be at least 1")
        try:
            args.pairs = eval_suite.pairs_of(Path(args.suite), Path(args.candidates))
            args.rows = eval_suite.read_results(Path(args.out)) if args.resume and Path(args.out).exists() else []
            eval_suite.evaluations_of(args.rows)
        except eval_suite.SuiteError as exc:
            raise UsageError(str(exc)) from None
    try:
        args.options = EvalOptions(args.inputs, args.atol, args.rtol, args.dtype, args.trials, args.warmup, args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.harness is not None and not shlex.split(args.harness):
        raise UsageError("--harness names no command")


def _call_options(args: argparse.Namespace) -> dict[str, Any]:
    """evaluate's keyword arguments from the command line."""
    return {**args.options.key(), "flag_speedup": args.flag_speedup, "python": args.python,
            "harness": shlex.split(args.harness) if args.harness else None, "batch": args.batch,
            "gpu": args.gpu, "timeout": args.timeout, "mode": args.mode, "share": args.share}


def eval_command(client: Client, args: argparse.Namespace) -> int:
    try:
        if args.suite is None:
            return _single(client, args)
        return _batch(client, args)
    except EvaluationError as exc:  # one pair's harness printed a line that is not one
        return fail(args, "bad_result", str(exc))
    except KeyboardInterrupt:
        print("\nkrex: interrupted: the evaluations in flight were cancelled", file=sys.stderr)
        return EXIT_SIGNAL_BASE + signal.SIGINT


def _single(client: Client, args: argparse.Namespace) -> int:
    evaluation = client.evaluate(args.problem, args.candidate, **_call_options(args))
    if args.json:
        emit_json(evaluation.to_dict())
    else:
        print("\n".join(printable(line) for line in evaluation_lines(evaluation)))
    return 0 if evaluation.correct and evaluation.trusted else EXIT_NOT_TRUSTED


def evaluation_lines(e: Evaluation) -> list[str]:
    """One evaluation for a person: what ran, whether it is right, its times, whether to trust them."""
    lines = [f"{e.problem} / {e.candidate}  ({e.command_id}, {e.label})"]
    check = e.check or {}
    checked = f" ({check.get('passed')}/{check.get('input_sets')} input sets)" if check else ""
    fresh = e.fresh_check
    fresh_text = "" if fresh is None else f"   fresh check {'passed' if fresh.get('passed') else 'FAILED'}"
    lines.append(f"compiled {_yes(e.compiled)}   correct {_yes(e.correct)}{checked}{fresh_text}")
    if e.speedup is not None:
        harness = e.harness_timing or {}
        own = (f"; the harness said {harness['reference']['median_ms']:.4g} / {harness['candidate']['median_ms']:.4g} ms"
               if e.times_from == "below" and harness else "")
        lines.append(f"reference {e.reference_ms:.4g} ms   candidate {e.candidate_ms:.4g} ms   "
                     f"speedup {e.speedup:.2f}x   (medians from {e.times_from}{own})")
    if e.regions:
        lines.append("regions  " + " · ".join(_region_text(r.role, r.region, r.verdict, r.integrity) for r in e.regions))
    if e.failure_class:
        lines.append(f"failure  {e.failure_class}: {e.failure_message}")
    if e.phases_s:
        lines.append("time     " + _phases_text(e.phases_s))
    lines.append("trusted  yes" if e.trusted else f"trusted  no: {'; '.join(e.untrusted_reasons)}")
    if e.review:
        lines.append(f"review   {e.review_reason}")
    return lines


# Where a command's time went, in the order it goes: its wait for a slot, the
# harness's load, the wait for a compile slot, the compile, the checks, the
# timed regions (docs/evaluation.md, "Where the time goes").
_PHASES = (("queue", "queued"), ("load", "load"), ("compile_wait", "compile slot"), ("compile", "compile"),
           ("check", "check"), ("timed", "timed"))


def _phases_text(phases: Any) -> str:
    shown = [f"{name} {phases[key]:.2f} s" for key, name in _PHASES if isinstance(phases.get(key), (int, float))]
    run = phases.get("run")
    return " · ".join(shown) + (f"   (ran {run:.2f} s)" if isinstance(run, (int, float)) else "")


def _yes(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def _region_text(role: str, region: int | None, verdict: str | None, integrity: Any) -> str:
    if region is None:
        return f"{role}: no region"
    state = "n/a" if integrity is None else ("clean" if integrity.get("clean") else "flagged")
    windows = f" ({integrity.get('windows')} windows)" if integrity else ""
    return f"{role} {region} {verdict or 'not recorded'} {state}{windows}"


def _batch(client: Client, args: argparse.Namespace) -> int:
    pairs: list[eval_suite.SuitePair] = args.pairs
    keys = {p: p.key(args.options) for p in pairs}
    seen = eval_suite.done_keys(args.rows)
    todo = [p for p in pairs if eval_suite.key_text(keys[p]) not in seen]
    by_paths = {(str(p.problem.absolute()), str(p.candidate.absolute())): p for p in todo}
    batch = args.batch or Path(args.candidates).resolve().name
    out = open(args.out, "a") if args.out else None  # noqa: SIM115 (closed below, after Ctrl-C too)
    finished: list[Evaluation] = []
    progress = _Progress(len(pairs), len(pairs) - len(todo))
    try:
        with progress:
            found = client.evaluate_many([(p.problem, p.candidate) for p in todo], max_in_flight=args.max_in_flight,
                                         **(_call_options(args) | {"batch": batch}))
            for evaluation in found:
                pair = by_paths[(evaluation.problem_path, evaluation.candidate_path)]
                if out is not None:
                    out.write(eval_suite.row_of(evaluation, keys[pair]))
                    out.flush()
                finished.append(evaluation)
                progress.advance(f"{pair.problem.stem}/{pair.name}", evaluation)
    finally:
        if out is not None:
            out.close()
    # The pairs as they are now: a result the file keeps for another content or other options is not theirs.
    current = {eval_suite.key_text(k) for k in keys.values()}
    kept = [row for row in args.rows if eval_suite.key_text(row["key"]) in current]
    everything = eval_suite.evaluations_of(list({eval_suite.key_text(r["key"]): r for r in kept}.values())) + finished
    _print_summary(summarize(everything), args.json, len(todo), len(pairs) - len(todo))
    return 0


class _Progress:
    """A bar on a terminal, a plain line per result otherwise; both on stderr."""

    def __init__(self, total: int, skipped: int) -> None:
        self.total, self.count = total, skipped
        self._bar: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True))
            self._task = self._bar.add_task("eval", total=total, completed=skipped)
        elif skipped:
            print(f"krex: {skipped} of {total} pairs already in the results file", file=sys.stderr)

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def advance(self, name: str, e: Evaluation) -> None:
        self.count += 1
        line = printable(f"[{self.count}/{self.total}] {name}: {_outcome(e)}")
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
            self._bar.advance(self._task)
        else:
            print(line, file=sys.stderr, flush=True)


def _outcome(e: Evaluation) -> str:
    if e.failure_class and not (e.failure_class == "integrity_flagged" and e.correct):
        return f"{e.failure_class}: {e.failure_message}"
    speed = f", {e.speedup:.2f}x" if e.speedup is not None else ""
    trust = "trusted" if e.trusted else f"untrusted ({e.untrusted_reasons[0].split(':')[0]})"
    return f"correct{speed}, {trust}" + (", review" if e.review else "")


def _print_summary(summary: dict[str, Any], as_json: bool, ran: int, skipped: int) -> None:
    if as_json:
        emit_json(summary | {"ran": ran, "skipped": skipped})
        return
    from rich.table import Table

    from krex_runtime.cli.subcommands import console

    table = Table(title=f"krex eval: {summary['problems']} problems, {summary['evaluations']} evaluations "
                        f"({ran} run now, {skipped} from the results file)")
    for column in ("correct", "fast_0", "fast_1", "fast_1.5", "fast_2", "median speedup", "untrusted", "review"):
        table.add_column(column, justify="right")
    median = summary["median_speedup"]
    table.add_row(f"{summary['correct_pct']:.1f}%", *(f"{100 * v:.1f}%" for v in summary["fast_p"].values()),
                  "n/a" if median is None else f"{median:.2f}x", str(summary["untrusted"]), str(summary["review"]))
    out = console()
    out.print(table)
    failures = ", ".join(f"{name} {n}" for name, n in summary["failures"].items())
    out.print(f"failures: {failures or 'none'}   (fast_p: problems whose best correct candidate is over p; "
              f"trusted only: {', '.join(f'{100 * v:.1f}%' for v in summary['fast_p_trusted'].values())})",
              markup=False, highlight=False)
