"""One evaluation, phase by phase (docs/evaluation.md, "The harness"):

1. load: torch (and Triton's do_bench, to watch it), the problem, the
   reference model (constructed after `torch.manual_seed(seed)`, outside any
   compile slot);
2. compile, in a compile slot (the time taken to get one is compile_wait):
   the candidate's import, `ModelNew(*get_init_inputs())` under the same
   seed, and its first call (input set 0: Triton compiles on a first call);
3. check: every seeded input set, reference then candidate;
4. timed: the reference in its own region, then the candidate in another
   (trials.py), each region's id kept with its times;
5. fresh check (counted in `check`): the candidate's output of the last timed
   trial against the reference's on those same inputs, then one more input
   set from a seed drawn at random.

The first failure ends the evaluation (failures.Stop); whatever was reached
is reported. `compiled` is true once the candidate imported, constructed and
ran its first call without a build error; `correct` is True when the check
and the fresh check passed, False when either failed, None when neither
failed but the evaluation stopped before both were done.
"""

from __future__ import annotations

import contextlib
import secrets
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from krex_runtime.eval.harness import failures, framework_watch, module_files, stats
from krex_runtime.eval.harness.arguments import Arguments
from krex_runtime.eval.harness.compile_slot import CompileSlot
from krex_runtime.eval.harness.failures import COMPILE_ERROR, INCORRECT, RUNTIME_ERROR, Failure, Stop, classify
from krex_runtime.eval.harness.module_files import SourceFile
from krex_runtime.eval.harness.outputs import Comparison, compare
from krex_runtime.eval.harness.result_line import Report
from krex_runtime.eval.harness.trials import Trials, make_inputs, run_trials


@dataclass
class _Run:
    args: Arguments
    problem_src: SourceFile
    candidate_src: SourceFile
    report: Report
    torch: Any = None
    device: str = "cuda:0"
    dtype: Any = None
    problem: types.ModuleType | None = None
    reference: Any = None
    candidate: Any = None
    watched: framework_watch.Snapshot | None = None
    checking: bool = False  # in the check or the fresh check: a failure there means "not correct"

    def inputs(self, seed: int) -> list[Any]:
        assert self.problem is not None
        try:
            return make_inputs(self.torch, self.problem.get_inputs, seed, self.device, self.dtype)
        except Exception as exc:
            raise Stop(_problem_failure(exc, "problem get_inputs")) from exc


@contextlib.contextmanager
def _phase(run: _Run, name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        run.report.phases_s[name] = run.report.phases_s.get(name, 0.0) + time.monotonic() - started


def _guarded(where: str, default: str, fn: Callable[[], Any]) -> Any:
    """fn(); what it raises, as a Stop with its failure."""
    try:
        return fn()
    except Stop:
        raise
    except Exception as exc:
        raise Stop(classify(exc, where, default)) from exc


def _problem_failure(exc: BaseException, where: str) -> Failure:
    """The problem's own code failed: not the candidate's build, whatever it raised."""
    return replace(classify(exc, where), kind=RUNTIME_ERROR)


def _construct(run: _Run, cls: Any) -> Any:
    torch, seed = run.torch, run.args.seed
    assert run.problem is not None
    torch.manual_seed(seed)
    init = run.problem.get_init_inputs()
    torch.manual_seed(seed)  # the same parameters for both models, as KernelBench makes them
    model = cls(*init).to(run.device)
    return model if run.args.dtype == "float32" else model.to(run.dtype)


def _load(run: _Run) -> None:
    try:
        import torch
    except Exception as exc:
        raise Stop(replace(classify(exc, "import torch"), kind=RUNTIME_ERROR)) from exc
    run.torch = torch
    run.device, run.dtype = f"cuda:{run.args.device_index}", getattr(torch, run.args.dtype)
    try:
        torch.cuda.set_device(run.args.device_index)
    except Exception as exc:
        raise Stop(replace(classify(exc, f"GPU {run.args.device_index}"), kind=RUNTIME_ERROR)) from exc
    framework_watch.import_triton_testing()
    run.watched = framework_watch.snapshot()
    try:
        run.problem = module_files.load(run.problem_src, "problem")
        module_files.need(run.problem, run.problem_src, "Model", "get_inputs", "get_init_inputs")
        run.reference = _construct(run, run.problem.Model)
        torch.cuda.synchronize()
    except Exception as exc:
        raise Stop(_problem_failure(exc, "problem")) from exc


def _first_call(run: _Run) -> None:
    inputs = run.inputs(run.args.seed)
    try:
        run.candidate(*inputs)
        run.torch.cuda.synchronize()
    except Exception as exc:
        failure = classify(exc, "first forward")
        run.report.compiled = failure.kind != COMPILE_ERROR
        raise Stop(failure) from exc


def _compile(run: _Run) -> None:
    slot = CompileSlot()
    try:
        slot.acquire()
    except OSError as exc:
        raise Stop(Failure(RUNTIME_ERROR, f"compile slot: {exc}")) from exc
    run.report.phases_s["compile_wait"] = slot.wait_s
    try:
        with _phase(run, "compile"):
            module = _guarded("import", COMPILE_ERROR, lambda: module_files.load(run.candidate_src, "candidate"))
            _guarded("import", COMPILE_ERROR, lambda: module_files.need(module, run.candidate_src, "ModelNew"))
            run.candidate = _guarded("construction", RUNTIME_ERROR, lambda: _construct(run, module.ModelNew))
            run.report.compiled = True
            _first_call(run)
    finally:
        slot.release()


def _forward(run: _Run, model: Any, inputs: list[Any], who: str) -> Any:
    try:
        out = model(*inputs)
        run.torch.cuda.synchronize()
        return out
    except Exception as exc:
        failure = classify(exc, f"{who} forward")
        raise Stop(failure if who == "candidate" else replace(failure, kind=RUNTIME_ERROR)) from exc


def _compare(run: _Run, ref: Any, out: Any) -> Comparison:
    try:
        return compare(run.torch, ref, out, run.args.atol, run.args.rtol)
    except Exception as exc:
        raise Stop(classify(exc, "comparing the outputs")) from exc


def _check(run: _Run) -> None:
    a = run.args
    run.checking = True
    check: dict[str, Any] = {"input_sets": a.inputs, "passed": 0, "atol": a.atol, "rtol": a.rtol, "dtype": a.dtype,
                             "max_abs_error": 0.0, "max_rel_error": 0.0, "failed_set": None}
    run.report.check = check
    for i in range(a.inputs):
        inputs = run.inputs(a.seed + i)
        ref = _forward(run, run.reference, inputs, "reference")
        got = _compare(run, ref, _forward(run, run.candidate, inputs, "candidate"))
        for key, value in (("max_abs_error", got.max_abs_error), ("max_rel_error", got.max_rel_error)):
            check[key] = None if value is None or check[key] is None else max(check[key], value)
        if got.failure is not None:
            check["failed_set"] = i
            raise Stop(Failure(got.failure, f"input set {i}: {got.message}"))
        check["passed"] = i + 1
    run.checking = False  # passed: a failure in the timing leaves correctness unknown until the fresh check


def _times(run: _Run, model: Any, inputs: list[Any], who: str) -> tuple[dict[str, Any], Trials]:
    from krex_runtime.client import RegionError, region

    a = run.args
    try:
        with region() as r:
            trials = run_trials(run.torch, model, inputs, _get_inputs(run), a.seed, run.device, run.dtype,
                                a.trials, a.warmup)
    except RegionError as exc:
        raise Stop(Failure(RUNTIME_ERROR, f"the {who}'s region: {exc}")) from exc
    except Stop:
        raise
    except Exception as exc:
        failure = classify(exc, f"{who} timed forward")
        raise Stop(failure if who == "candidate" else replace(failure, kind=RUNTIME_ERROR)) from exc
    times = {"region": r.id, **stats.summary(trials.times_ms), "stream": hex(trials.stream) if trials.stream else "0"}
    return times, trials


def _get_inputs(run: _Run) -> Callable[[], Any]:
    assert run.problem is not None
    return run.problem.get_inputs  # type: ignore[no-any-return]


def _timed(run: _Run) -> tuple[list[Any], Trials]:
    inputs = run.inputs(run.args.seed + run.args.inputs)
    reference, _ = _times(run, run.reference, inputs, "reference")
    candidate, trials = _times(run, run.candidate, inputs, "candidate")
    run.report.timing = {"reference": reference, "candidate": candidate}  # both or none (schema 1)
    return inputs, trials


def _fresh(run: _Run, inputs: list[Any], trials: Trials) -> None:
    """The last timed trial's output, then a never-seen input set."""
    run.checking = True
    fresh: dict[str, Any] = {"passed": False, "max_abs_error": None, "max_rel_error": None, "message": ""}
    run.report.fresh_check = fresh
    steps: list[tuple[str, Callable[[], tuple[list[Any], Any]]]] = [
        ("the output of the last timed trial", lambda: (inputs, trials.last_output)),
        ("a fresh input set", lambda: _fresh_call(run)),
    ]
    for what, produce in steps:
        inputs_now, out = produce()
        ref = _forward(run, run.reference, inputs_now, "reference")
        got = _compare(run, ref, out)
        fresh["max_abs_error"], fresh["max_rel_error"] = got.max_abs_error, got.max_rel_error
        if got.failure is not None:
            fresh["message"] = (f"{what} disagrees with the reference ({got.message}): "
                                "a cached or special-cased result")
            raise Stop(Failure(INCORRECT, f"fresh check: {fresh['message']}"))
    fresh["passed"], fresh["message"] = True, "the last timed trial and a fresh input set match the reference"


def _fresh_call(run: _Run) -> tuple[list[Any], Any]:
    inputs = run.inputs(secrets.randbelow(1 << 31))
    return inputs, _forward(run, run.candidate, inputs, "candidate")


def _steps(run: _Run) -> None:
    with _phase(run, "load"):
        _load(run)
    with run.torch.no_grad():
        _compile(run)
        with _phase(run, "check"):
            _check(run)
        with _phase(run, "timed"):
            inputs, trials = _timed(run)
        with _phase(run, "check"):
            _fresh(run, inputs, trials)
    run.report.correct = True


def evaluate(args: Arguments, problem_src: SourceFile, candidate_src: SourceFile) -> Report:
    report = Report(problem=problem_src.name, candidate=candidate_src.name,
                    problem_sha256=problem_src.sha256, candidate_sha256=candidate_src.sha256)
    run = _Run(args, problem_src, candidate_src, report)
    try:
        _steps(run)
    except Stop as stop:
        report.failure = stop.failure
        report.correct = False if run.checking else None
    except SystemExit as exc:  # the candidate's (or the problem's) code asked the process to end
        report.failure = Failure(RUNTIME_ERROR, f"the evaluated code called exit({exc.code!r})",
                                 failures.tail("".join(traceback.format_exception(exc))))
        report.correct = False if run.checking else None
    if run.watched is not None:
        report.harness_patched = framework_watch.replaced(run.watched)
    return report
