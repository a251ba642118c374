"""The evaluation harness (krex_runtime/eval/harness, docs/evaluation.md "The
harness"), run as a real KREX command: `krex run -- python -m
krex_runtime.eval.harness ...` under a runtime with a simulated GPU, the torch
stand-in of tests/tenants/torch_on_sim (numpy values, real C compiles for
load_inline) and the CI problems and candidates of tests/tenants/eval.
Each failure class comes from its own candidate file; honest candidates are
correct with both times, each in its own region of the runtime's records;
the cheats fail the fresh check. The compile-slot tests run the harness as
plain processes on a simulated device, the slot folder theirs. Then the
pure parts: figures, failure classes, files, arguments, slots."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import REPO, TENANTS, module_runtime, regions_config

from krex_runtime.eval.harness import arguments, failures, framework_watch, module_files, result_line, stats
from krex_runtime.eval.harness.compile_slot import ENV as SLOTS_ENV
from krex_runtime.eval.harness.compile_slot import CompileSlot
from krex_runtime.sim import device_file, layout
from krex_runtime.testing.hygiene import lock_held
from krex_runtime.testing.local_runtime import Runtime, command, wait_until

EVAL = TENANTS / "eval"
STAND_INS = TENANTS / "torch_on_sim"
TRIALS, WARMUP, INPUT_SETS = 5, 1, 5


def harness_argv(problem: str, candidate: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "krex_runtime.eval.harness", "--problem", str(EVAL / f"{problem}.py"),
            "--candidate", str(EVAL / f"{candidate}.py"), "--trials", str(TRIALS), "--warmup", str(WARMUP), *extra]


def parse(stdout: str) -> dict[str, Any]:
    last = stdout.rstrip("\n").splitlines()[-1]
    marker, _, body = last.partition(" ")
    assert marker == result_line.MARKER, f"the last stdout line is not the result: {last!r}"
    return json.loads(body)  # type: ignore[no-any-return]


@dataclass
class Evaluated:
    returncode: int  # krex run's
    run: dict[str, Any]  # krex run --json: the command's record, stdout, stderr, regions
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        return parse(self.run.get("stdout", ""))

    def why(self) -> str:
        return (f"krex run exited {self.returncode}\nstdout:\n{self.run.get('stdout', '')[-3000:]}\n"
                f"command's stderr:\n{self.run.get('stderr', '')[-4000:]}\nkrex run's stderr:\n{self.stderr[-2000:]}")


def evaluate(rt: Runtime, problem: str, candidate: str, env: dict[str, str]) -> Evaluated:
    done = subprocess.run([*command("krex"), "run", "--json", "--", *harness_argv(problem, candidate)],
                          env={**rt.env, **env}, capture_output=True, text=True, timeout=240)
    try:
        run = json.loads(done.stdout)
    except json.JSONDecodeError:
        run = {"stdout": done.stdout}
    return Evaluated(done.returncode, run, done.stderr)


FAILING = {  # candidate: (its problem, the failure class, a fragment of the message)
    "relu_add__compile_error": ("relu_add", "compile_error", "Error building extension 'relu_add_broken'"),
    "relu_add__syntax_error": ("relu_add", "compile_error", "SyntaxError"),
    "relu_add__runtime_error": ("relu_add", "runtime_error", "same device"),
    "row_sum__wrong_shape": ("row_sum", "wrong_shape", "(512, 1)"),
    "relu_add__wrong_dtype": ("relu_add", "wrong_dtype", "float16"),
    "relu_add__incorrect": ("relu_add", "incorrect", "input set 0"),
    "relu_add__oom": ("relu_add", "out_of_memory", "out of memory"),
    "relu_add__cached": ("relu_add", "incorrect", "fresh check: the output of the last timed trial"),
    "relu_add__special_cased": ("relu_add", "incorrect", "fresh check: the output of the last timed trial"),
}
HONEST = {
    "relu_add__inline": "relu_add", "relu_add__torch": "relu_add", "relu_add__fork_join": "relu_add",
    "relu_add__side_stream": "relu_add", "relu_add__chatty": "relu_add", "relu_add__patched_timer": "relu_add",
    "small_matmul__torch": "small_matmul", "row_sum__torch": "row_sum",
}
CHEATS = ("relu_add__cached", "relu_add__special_cased")
# Honest: all the work on a side stream forked from and joined back to the
# timed one, no launch on the timed stream itself (clean: docs/integrity.md).
JOINED_SIDE_STREAMS = ("relu_add__side_stream",)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[dict[str, Evaluated]]:
    folder = tmp_path_factory.mktemp("eval")
    cases = {**{c: p for c, (p, _, _) in FAILING.items()}, **HONEST}
    for rt in module_runtime(folder / "rt", policy="krex", sim=1, slots=8, extra_config=regions_config()):
        stand_ins = os.pathsep.join(p for p in (str(STAND_INS), rt.env.get("PYTHONPATH", "")) if p)
        env = {"PYTHONPATH": stand_ins, "TORCH_EXTENSIONS_DIR": str(folder / "extensions")}
        with ThreadPoolExecutor(max_workers=4) as pool:  # their start-ups overlap; their regions take turns
            done = dict(pool.map(lambda c, rt=rt, env=env: (c, evaluate(rt, cases[c], c, env)), cases))
        yield done


def _common(e: Evaluated) -> dict[str, Any]:
    assert e.returncode == 0, e.why()
    assert e.run.get("exit_code", 0) == 0, e.why()
    result = e.result
    assert result["schema"] == 1 and set(result["phases_s"]) == set(result_line.PHASES), e.why()
    return result


@pytest.mark.parametrize("candidate", list(FAILING))
def test_each_failure_class_comes_from_its_file(candidate: str, evaluated: dict[str, Evaluated]) -> None:
    problem, kind, fragment = FAILING[candidate]
    e = evaluated[candidate]
    result = _common(e)
    why = e.why()
    failure = result["failure"]
    assert failure is not None and failure["class"] == kind, why
    assert fragment in failure["message"] and "\n" not in failure["message"], why
    assert result["problem"] == f"{problem}.py" and result["candidate"] == f"{candidate}.py", why
    data = (EVAL / f"{candidate}.py").read_bytes()
    assert result["candidate_sha256"] == hashlib.sha256(data).hexdigest(), why
    assert result["correct"] is (None if kind in ("compile_error", "out_of_memory", "runtime_error") else False), why
    if kind == "compile_error":
        assert result["compiled"] is False and result["check"] is None, why
        assert len(failure["detail"].splitlines()) <= failures.DETAIL_LINES, why
    if candidate == "relu_add__compile_error":
        assert "error: expected" in failure["detail"], why  # the compiler's own words, from load_inline's error
    if kind in ("wrong_shape", "wrong_dtype") or candidate == "relu_add__incorrect":
        assert result["check"]["failed_set"] == 0 and result["check"]["passed"] == 0, why
        assert result["timing"] is None and result["fresh_check"] is None, why
    if candidate == "relu_add__incorrect":
        assert result["check"]["max_abs_error"] > 0.01, why


@pytest.mark.parametrize("candidate", CHEATS)
def test_a_cheat_passes_the_check_and_fails_the_fresh_check(candidate: str, evaluated: dict[str, Evaluated]) -> None:
    e = evaluated[candidate]
    result, why = _common(e), e.why()
    assert result["compiled"] is True and result["correct"] is False, why
    assert result["check"]["passed"] == INPUT_SETS and result["check"]["failed_set"] is None, why
    fresh = result["fresh_check"]
    assert fresh["passed"] is False and "cached or special-cased" in fresh["message"], why
    assert fresh["max_abs_error"] > 0.01, why
    assert result["timing"]["candidate"]["trials"] == TRIALS, why  # it was timed: the check after the timing caught it


@pytest.mark.parametrize("candidate", list(HONEST))
def test_an_honest_candidate_is_correct_with_both_times_in_their_own_regions(
        candidate: str, evaluated: dict[str, Evaluated]) -> None:
    e = evaluated[candidate]
    result, why = _common(e), e.why()
    assert result["failure"] is None and result["compiled"] is True and result["correct"] is True, why
    assert result["check"]["passed"] == INPUT_SETS and result["fresh_check"]["passed"] is True, why
    timing = result["timing"]
    regions = {r["region"]: r for r in e.run.get("regions", [])}
    ids = [timing["reference"]["region"], timing["candidate"]["region"]]
    assert all(isinstance(i, int) for i in ids) and ids[0] != ids[1], why
    assert set(ids) == set(regions), f"the runtime's regions {sorted(regions)}; {why}"
    for times in timing.values():
        assert times["trials"] == TRIALS, why
        assert 0 < times["min_ms"] <= times["p10_ms"] <= times["median_ms"] <= times["p90_ms"], why
        assert times["stream"] == "0", why  # the legacy default stream: torch's current one
        record = regions[times["region"]].get("integrity") or {}
        assert record.get("windows") == TRIALS, f"{record}; {why}"  # one judged window per trial, nothing else
        if candidate != "relu_add__patched_timer":
            assert record.get("clean") is True, f"{record}; {why}"
        else:  # replaced at the candidate's import, before both timings: every region after it is flagged
            assert set(record.get("flags") or {}) == {"patched_harness"}, f"{record}; {why}"
    expected = ["torch.cuda.Event.elapsed_time"] if candidate == "relu_add__patched_timer" else []
    assert result["harness_patched"] == expected, why


@pytest.mark.parametrize("candidate", JOINED_SIDE_STREAMS)
def test_honest_side_stream_work_joined_back_is_judged_clean(candidate: str, evaluated: dict[str, Evaluated]) -> None:
    e = evaluated[candidate]
    region = e.result["timing"]["candidate"]["region"]
    record = next(r.get("integrity") or {} for r in e.run.get("regions", []) if r["region"] == region)
    assert record.get("clean") is True, f"{record}; {e.why()}"


def test_what_the_candidate_prints_never_corrupts_the_result_line(evaluated: dict[str, Evaluated]) -> None:
    """It prints without newlines, from C's stdio too, and a forged marker:
    all of it goes to stderr, the result line alone to stdout."""
    e = evaluated["relu_add__chatty"]
    result, why = _common(e), e.why()
    assert e.run["stdout"].count("\n") == 1 and "forged" not in e.run["stdout"], why
    assert result["correct"] is True, why
    for said in ("candidate imported", "no newline here", "from C, buffered", '"forged": true'):
        assert said in e.run.get("stderr", ""), why


# -- compile slots: the harness as plain processes on a simulated device --------------------------------------


@pytest.fixture
def sim_env(tmp_path: Path, native_built: Path) -> Iterator[dict[str, str]]:
    name = f"eval-{os.getpid()}-{tmp_path.name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}
    env.update({"PYTHONPATH": os.pathsep.join([str(STAND_INS), str(REPO)]),
                "LD_LIBRARY_PATH": str(REPO / "native" / "build" / "sim"), layout.ENV_DEVICE: name,
                "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"), "EVAL_TEST_BUILD_STARTED": str(tmp_path / "started"),
                "EVAL_TEST_BUILD_RELEASE": str(tmp_path / "release")})
    yield env
    device_file.remove_device(name)


def _slots(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "compile-slots"
    folder.mkdir()
    for i in range(count):
        (folder / str(i)).touch(mode=0o644)
    return folder


def _harness(env: dict[str, str], slots: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(harness_argv("relu_add", "relu_add__slow_build"), env={**env, SLOTS_ENV: str(slots)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_compile_slot_is_held_while_the_candidate_compiles(tmp_path: Path, sim_env: dict[str, str]) -> None:
    slots = _slots(tmp_path, 1)
    proc = _harness(sim_env, slots)
    try:
        wait_until(lambda: Path(sim_env["EVAL_TEST_BUILD_STARTED"]).exists() or proc.poll() is not None,
                   60.0, "the candidate's import began")
        assert proc.poll() is None, proc.communicate()
        assert lock_held(slots / "0")  # the import runs in the slot
        Path(sim_env["EVAL_TEST_BUILD_RELEASE"]).touch()
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    result = parse(out)
    assert result["correct"] is True and result["compiled"] is True, err
    assert result["phases_s"]["compile_wait"] >= 0 and result["phases_s"]["compile"] > 0, result["phases_s"]
    assert not lock_held(slots / "0")  # and given back


def _blocked_on(pid: int) -> bool:
    """/proc/locks lists a process waiting for a lock with `->`."""
    with open("/proc/locks") as f:
        return any("->" in line and f" {pid} " in line for line in f)


def test_a_compile_waits_for_a_slot_another_holds(tmp_path: Path, sim_env: dict[str, str]) -> None:
    slots = _slots(tmp_path, 1)
    Path(sim_env["EVAL_TEST_BUILD_RELEASE"]).touch()  # this candidate's build goes straight through
    holder = os.open(slots / "0", os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another command compiling
    proc = _harness(sim_env, slots)
    try:
        wait_until(lambda: _blocked_on(proc.pid) or proc.poll() is not None, 60.0, "the harness waits for the slot")
        assert not Path(sim_env["EVAL_TEST_BUILD_STARTED"]).exists()  # nothing of the candidate ran yet
        os.close(holder)
        holder = -1
        out, err = proc.communicate(timeout=120)
    finally:
        if holder >= 0:
            os.close(holder)
        proc.kill()
    assert proc.returncode == 0, err
    result = parse(out)
    assert result["correct"] is True, err
    assert result["phases_s"]["compile_wait"] > 0, result["phases_s"]
    assert result["timing"]["reference"]["region"] is None  # outside a runtime a region is a no-op


def _standalone(env: dict[str, str], candidate: str) -> dict[str, Any]:
    done = subprocess.run(harness_argv("relu_add", candidate), env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return parse(done.stdout)


def test_load_inline_builds_in_the_extensions_folder_once(tmp_path: Path, sim_env: dict[str, str]) -> None:
    """The stand-in's load_inline really compiles, where TORCH_EXTENSIONS_DIR
    says, and a second evaluation of the same sources reuses the library."""
    first = _standalone(sim_env, "relu_add__inline")
    folder = Path(sim_env["TORCH_EXTENSIONS_DIR"]) / "relu_add_fused"
    libraries = list(folder.glob("relu_add_fused_*.so"))
    assert first["correct"] is True and len(libraries) == 1 and (folder / "relu_add_fused.c").exists()
    built = libraries[0].stat().st_mtime_ns
    second = _standalone(sim_env, "relu_add__inline")
    assert second["correct"] is True and list(folder.glob("relu_add_fused_*.so")) == libraries
    assert libraries[0].stat().st_mtime_ns == built


def test_a_candidate_that_exits_still_gets_its_result_line(sim_env: dict[str, str]) -> None:
    result = _standalone(sim_env, "relu_add__exits")
    assert result["failure"]["class"] == "runtime_error" and "exit(0)" in result["failure"]["message"]
    assert result["compiled"] is True and result["correct"] is None


def test_bad_arguments_are_refused_in_one_line_with_status_2(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = harness_argv("relu_add", "no_such_candidate")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == arguments.USAGE_EXIT
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "no_such_candidate.py: no such file" in done.stderr


# -- the pure parts ----------------------------------------------------------------------------------------------


def test_the_figures_of_a_list_of_times() -> None:
    s = stats.summary([4.0, 1.0, 3.0, 2.0])
    assert s == {"trials": 4, "median_ms": 2.5, "min_ms": 1.0, "p10_ms": 1.3, "p90_ms": 3.7, "mean_ms": 2.5,
                 "std_ms": 1.118034}
    assert stats.summary([0.5])["p90_ms"] == 0.5
    with pytest.raises(ValueError):
        stats.summary([])
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


class CompilationError(Exception):
    """Named as Triton's (triton.compiler.errors): classified by its name."""


class OutOfMemoryError(RuntimeError):
    """Named as torch.cuda's."""


@pytest.mark.parametrize(("exc", "kind"), [
    (SyntaxError("invalid syntax", ("c.py", 3, 1, "x(")), "compile_error"),
    (RuntimeError("Error building extension 'k': [1/2] nvcc ...\nk.cu(3): error: bad\nninja: build stopped"),
     "compile_error"),
    (CompilationError("at 4:8: unsupported"), "compile_error"),
    (OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "out_of_memory"),
    (RuntimeError("CUDA error: out of memory"), "out_of_memory"),
    (ValueError("bad\nvalue"), "runtime_error"),
])
def test_an_exception_becomes_its_failure_class(exc: BaseException, kind: str) -> None:
    failure = failures.classify(exc, "forward")
    assert failure.kind == kind
    assert failure.message.startswith("forward: ") and "\n" not in failure.message
    assert len(failure.detail.splitlines()) <= failures.DETAIL_LINES


def test_a_build_error_keeps_the_compilers_last_lines() -> None:
    output = "\n".join(f"line {i}" for i in range(50))
    failure = failures.classify(RuntimeError(f"Error building extension 'k': {output}"), "import")
    assert failure.message == "import: Error building extension 'k'"
    assert failure.detail.splitlines() == [f"line {i}" for i in range(30, 50)]


def test_a_file_is_hashed_and_loaded_as_a_fresh_module(tmp_path: Path) -> None:
    path = tmp_path / "prob.py"
    path.write_text("X = []\n")
    source = module_files.read(str(path))
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and source.name == "prob.py"
    first, second = module_files.load(source, "problem"), module_files.load(source, "problem")
    assert first is not second and first.X is not second.X
    with pytest.raises(module_files.MissingName, match=re.escape("prob.py does not define Model, get_inputs")):
        module_files.need(first, source, "Model", "get_inputs", "X")
    path.write_text("raise KeyError('at import')\n")
    with pytest.raises(KeyError):
        module_files.load(module_files.read(str(path)), "problem")


@pytest.mark.parametrize(("argv", "says"), [
    (["--candidate", "c.py"], "--problem"),
    (["--problem", "p.py", "--candidate", "c.py", "--inputs", "0"], "--inputs must be at least 1"),
    (["--problem", "p.py", "--candidate", "c.py", "--trials", "0"], "--trials must be at least 1"),
    (["--problem", "p.py", "--candidate", "c.py", "--atol", "nan"], "--atol must be a finite number"),
    (["--problem", "p.py", "--candidate", "c.py", "--dtype", "int8"], "--dtype must be one of"),
    (["--problem", "p.py", "--candidate", "c.py", "--bogus"], "unrecognized arguments"),
    (["--problem", "p.py", "--candidate", "missing.py"], "missing.py: no such file"),
])
def test_a_bad_command_line_says_why(argv: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("p.py", "c.py"):
        (tmp_path / name).write_text("")
    with pytest.raises(arguments.UsageError, match=re.escape(says)):
        arguments.parse(argv)


def test_compile_slots_without_blocking_first(tmp_path: Path) -> None:
    slots = _slots(tmp_path, 2)
    holder = os.open(slots / "0", os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with CompileSlot(str(slots)) as slot:
            assert slot.path == str(slots / "1") and lock_held(slots / "1")
        assert not lock_held(slots / "1")
    finally:
        os.close(holder)
    with CompileSlot("") as free:  # no variable: no limit
        assert free.path is None and free.wait_s == 0.0
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(OSError, match="holds no slot file"):
        CompileSlot(str(empty)).acquire()


def test_a_replaced_timing_function_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Watched by name in whatever modules are loaded: replaced, appeared or the same."""
    cuda = types.ModuleType("torch.cuda")
    cuda.Event = type("Event", (), {"record": lambda self: None, "elapsed_time": lambda self, end: 1.0})
    cuda.synchronize = lambda: None
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    for name, module in (("torch", torch), ("torch.cuda", cuda), ("triton", None), ("triton.testing", None)):
        monkeypatch.setitem(sys.modules, name, module)
    before = framework_watch.snapshot()
    assert framework_watch.replaced(before) == []
    monkeypatch.setattr(cuda.Event, "elapsed_time", lambda self, end: 0.5)
    monkeypatch.setattr(cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True, raising=False)  # absent before: appeared
    assert framework_watch.replaced(before) == ["torch.cuda.Event.elapsed_time", "torch.cuda.synchronize",
                                                "torch.allclose"]
    monkeypatch.setattr(cuda, "Event", type("Event", (cuda.Event,), {}))  # a subclass inherits the methods
    assert "torch.cuda.Event" in framework_watch.replaced(before)


def test_a_non_finite_figure_is_null_on_the_line() -> None:
    report = result_line.Report("p.py", "c.py", "0" * 64, "1" * 64,
                                fresh_check={"passed": False, "max_abs_error": float("nan"), "max_rel_error": None,
                                             "message": "x"})
    text = result_line.line(report)
    assert text.startswith("KREX-EVAL-RESULT {") and "\n" not in text
    assert json.loads(text.partition(" ")[2])["fresh_check"]["max_abs_error"] is None
