"""The client side of an evaluation: the result line read strictly
(wire/eval_line.py), an Evaluation built of a command's record and output
and its `trusted` rule, rule by rule (wire/evaluation.py), the fast_p
summary; then `evaluate` and `evaluate_many` through a real runtime on a
simulated GPU, with a stand-in harness (tests/tenants/eval_fake_harness.py)
whose candidate file says what it does."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, TENANTS, module_runtime, regions_config

from krex_runtime import AsyncClient
from krex_runtime.testing.local_runtime import Runtime
from krex_runtime.wire.evaluation import (
    MARKER,
    Evaluation,
    EvaluationError,
    Pair,
    evaluation_from_dict,
    evaluation_of,
    parse_line,
    summarize,
)

FAKE = [PY, str(TENANTS / "eval_fake_harness.py")]

# --- a line and a record as the harness and the runtime give them ------------------------


def times(region: int | None, median: float, trials: int = 100) -> dict[str, Any]:
    return {"region": region, "trials": trials, "median_ms": median, "min_ms": median * 0.9, "p10_ms": median * 0.95,
            "p90_ms": median * 1.05, "mean_ms": median, "std_ms": 0.01, "stream": "0"}


def good_line() -> dict[str, Any]:
    return {"schema": 1, "problem": "19_ReLU.py", "candidate": "19_ReLU.v2.py", "problem_sha256": "a" * 64,
            "candidate_sha256": "b" * 64, "compiled": True, "correct": True, "failure": None,
            "check": {"input_sets": 5, "passed": 5, "atol": 0.01, "rtol": 0.01, "dtype": "float32",
                      "max_abs_error": 1e-6, "max_rel_error": 1e-6, "failed_set": None},
            "fresh_check": {"passed": True, "max_abs_error": 1e-6, "max_rel_error": 1e-6, "message": "agree"},
            "timing": {"reference": times(7, 2.0), "candidate": times(8, 1.0)},
            "phases_s": {"load": 0.1, "compile_wait": 0.0, "compile": 3.0, "check": 0.2, "timed": 0.5},
            "harness_patched": []}


def below(median: float, windows: int = 100) -> dict[str, Any]:
    return {"windows": windows, "median_ms": median, "min_ms": median * 0.9, "p10_ms": median * 0.95,
            "p90_ms": median * 1.05, "max_ms": median * 1.2, "mean_ms": median}


def region_record(region: int, median: float, verdict: str = "verified", clean: bool = True) -> dict[str, Any]:
    flags = {} if clean else {"escaped": {"count": 2, "reason": "work outside the window"}}
    summary = "integrity: clean (100 timed windows)" if clean else "integrity: flagged (escaped 2; 100 timed windows)"
    return {"region": region, "gpu": 0, "kind": "region", "verdict": verdict,
            "integrity": {"windows": 100, "clean": clean, "summary": summary, "flags": flags, "timing": below(median)}}


def good_record() -> dict[str, Any]:
    return {"id": "c-1", "state": "finished", "exit_code": 0, "signal": None, "label": "eval:b/19_ReLU/19_ReLU.v2",
            "queue_s": 0.25, "run_s": 4.0, "regions": [region_record(7, 2.0), region_record(8, 1.0)]}


def printed(line: dict[str, Any]) -> str:
    return "compiling...\n" + MARKER + json.dumps(line) + "\n"


def evaluation(line: dict[str, Any] | None = None, record: dict[str, Any] | None = None, **kw: Any) -> Evaluation:
    return evaluation_of(record or good_record(), printed(line or good_line()), **kw)


def codes(e: Evaluation) -> list[str]:
    return [r.split(":")[0] for r in e.untrusted_reasons]


# --- the line --------------------------------------------------------------------------


def test_a_good_line_reads_field_for_field() -> None:
    report = parse_line(printed(good_line()))
    assert report is not None and report.correct and report.timing is not None
    assert report.timing.candidate.region == 8 and report.check is not None and report.check.passed == 5
    assert report.to_dict()["timing"]["reference"]["median_ms"] == 2.0
    failing = good_line() | {"failure": {"class": "incorrect", "message": "m", "detail": "d"}}
    assert parse_line(printed(failing)).to_dict()["failure"] == {"class": "incorrect", "message": "m", "detail": "d"}


def test_only_the_last_line_is_the_result() -> None:
    assert parse_line("just output\n") is None
    assert parse_line("") is None
    # A result line the candidate printed before the harness's end is not the result.
    assert parse_line(printed(good_line()) + "more output\n") is None


@pytest.mark.parametrize(("change", "says"), [
    (lambda d: d["check"].update(passed="five"), "check.passed: expected an integer"),
    (lambda d: d.pop("compiled"), "compiled: required key is missing"),
    (lambda d: d.update(schema=2), "schema 2"),
    (lambda d: d.update(failure={"class": "exploded", "message": "m"}), "failure.class: 'exploded'"),
    (lambda d: d.update(failure={"message": "m"}), "failure.class: required key is missing"),
    (lambda d: d["timing"]["candidate"].update(median_ms=float("nan")), "expected a finite number"),
    (lambda d: d.update(harness_patched="torch"), "harness_patched: expected a list"),
    (lambda d: d.update(correct="yes"), "correct: expected true or false"),
])
def test_a_malformed_line_is_an_error_naming_its_field(change: Any, says: str) -> None:
    line = copy.deepcopy(good_line())
    change(line)
    with pytest.raises(EvaluationError, match=says.replace("(", r"\(")):
        parse_line(MARKER + json.dumps(line, allow_nan=True))


def test_a_line_that_is_not_json_or_not_an_object() -> None:
    with pytest.raises(EvaluationError, match="not JSON"):
        parse_line(MARKER + "{oops")
    with pytest.raises(EvaluationError, match="not a JSON object"):
        parse_line(MARKER + "[1, 2]")


def test_keys_a_later_harness_adds_are_left_out() -> None:
    assert parse_line(printed(good_line() | {"gpu_name": "H100"})) is not None


# --- the evaluation and the trusted rule -----------------------------------------------


def test_a_clean_correct_result_is_trusted_with_times_from_below() -> None:
    # The harness says 2.0/1.0 ms; from below 2.02/1.01 (within 2%): the reported times are below's.
    record = good_record()
    record["regions"] = [region_record(7, 2.02), region_record(8, 1.01)]
    e = evaluation(record=record)
    assert e.trusted and e.untrusted_reasons == () and e.correct and e.failure_class is None
    assert (e.reference_ms, e.candidate_ms, e.times_from) == (2.02, 1.01, "below")
    assert e.speedup == pytest.approx(2.0) and not e.review
    assert e.harness_timing is not None and e.harness_timing["candidate"]["median_ms"] == 1.0
    assert e.phases_s["queue"] == 0.25 and e.phases_s["compile"] == 3.0
    assert [(r.role, r.region, r.verdict) for r in e.regions] == [("reference", 7, "verified"), ("candidate", 8, "verified")]
    assert evaluation_from_dict(json.loads(json.dumps(e.to_dict()))) == e


@pytest.mark.parametrize(("change", "code"), [
    (lambda line, rec: rec["regions"][1].update(verdict="violated"), "region_not_verified"),
    (lambda line, rec: rec["regions"][0].update(verdict="unknown"), "region_not_verified"),
    (lambda line, rec: rec["regions"][1].update(integrity=None), "integrity_missing"),
    (lambda line, rec: rec["regions"][1]["integrity"].update(clean=False, summary="flagged"), "integrity_flagged"),
    (lambda line, rec: rec["regions"][1]["integrity"].pop("timing"), "timing_missing"),
    (lambda line, rec: rec["regions"][1]["integrity"]["timing"].update(windows=99), "timer_mismatch"),
    (lambda line, rec: rec["regions"][1]["integrity"]["timing"].update(median_ms=1.03), "timer_mismatch"),
    (lambda line, rec: line.update(harness_patched=["torch.cuda.Event.elapsed_time"]), "harness_patched"),
    (lambda line, rec: line["fresh_check"].update(passed=False, message="cached output"), "fresh_check_failed"),
    (lambda line, rec: line.update(fresh_check=None), "fresh_check_missing"),
    (lambda line, rec: line["timing"]["candidate"].update(region=None), "region_missing"),
    (lambda line, rec: rec["regions"].pop(), "region_missing"),
    (lambda line, rec: line.update(timing=None), "timing_missing"),
    (lambda line, rec: line.update(correct=False, failure={"class": "incorrect", "message": "set 1"}), "not_correct"),
])
def test_each_rule_makes_a_result_untrusted(change: Any, code: str) -> None:
    line, record = good_line(), good_record()
    change(line, record)
    e = evaluation(line, record)
    assert not e.trusted and code in codes(e), e.untrusted_reasons


def test_a_median_within_two_percent_agrees() -> None:
    record = good_record()
    record["regions"][1]["integrity"]["timing"]["median_ms"] = 1.019
    assert evaluation(record=record).trusted


def test_a_region_over_a_gpu_set_takes_its_worst_record() -> None:
    record = good_record()
    record["regions"].append(region_record(8, 1.0, verdict="violated") | {"gpu": 1})
    assert "region_not_verified" in codes(evaluation(record=record))


def test_a_sha_other_than_the_files_sent_is_untrusted() -> None:
    e = evaluation(pair=Pair("/p/19_ReLU.py", "/c/19_ReLU.v2.py", "a" * 64, "c" * 64))
    assert codes(e) == ["sha_mismatch"] and e.candidate_path == "/c/19_ReLU.v2.py"


def test_a_flagged_record_is_the_failure_when_nothing_else_failed() -> None:
    record = good_record()
    record["regions"][1] = region_record(8, 1.0, clean=False)
    e = evaluation(record=record)
    assert e.correct and e.failure_class == "integrity_flagged" and "escaped" in e.failure_message
    failed = good_line() | {"correct": False, "failure": {"class": "incorrect", "message": "set 1"}}
    assert evaluation(failed, record).failure_class == "incorrect"  # the harness's failure first


def test_a_speedup_over_the_threshold_asks_for_review_but_stays_trusted() -> None:
    line, record = good_line(), good_record()
    line["timing"]["candidate"]["median_ms"] = 0.1
    record["regions"][1] = region_record(8, 0.1)
    e = evaluation(line, record)
    assert e.speedup == pytest.approx(20.0) and e.review and "20.00x" in e.review_reason and e.trusted
    assert not evaluation(line, record, flag_speedup=50.0).review


def test_without_times_from_below_the_harness_times_are_shown_untrusted() -> None:
    record = good_record()
    for r in record["regions"]:
        r["integrity"].pop("timing")
    e = evaluation(record=record)
    assert e.times_from == "harness" and e.speedup == pytest.approx(2.0) and not e.trusted


def test_failure_classes_from_the_command_state() -> None:
    timeout = evaluation_of(good_record() | {"state": "timeout", "exit_code": None, "signal": 9,
                                             "reason": "ran past 5 s"}, "", stderr="...\nstill compiling")
    assert timeout.failure_class == "timeout" and "ran past 5 s" in timeout.failure_message
    assert timeout.failure_detail.endswith("still compiling") and codes(timeout) == ["no_result"]
    crashed = evaluation_of(good_record() | {"exit_code": 3}, "partial output\n",
                            stderr="\n".join(f"line {i}" for i in range(40)))
    assert crashed.failure_class == "runtime_error" and crashed.failure_message == "the harness exited with 3"
    assert crashed.failure_detail.splitlines() == [f"line {i}" for i in range(20, 40)]
    assert crashed.problem == "19_ReLU.py" and crashed.candidate == "19_ReLU.v2.py"  # from the label
    killed = evaluation_of(good_record() | {"exit_code": None, "signal": 9}, "")
    assert killed.failure_message == "the harness killed by signal 9"
    silent = evaluation_of(good_record(), "")
    assert silent.failure_message == "the harness exited with 0 without a result line"
    cancelled = evaluation_of(good_record() | {"state": "cancelled", "exit_code": None, "reason": "cancelled by c"}, "")
    assert cancelled.failure_class == "runtime_error" and "was cancelled" in cancelled.failure_message


def test_a_good_line_from_a_command_that_ran_past_its_limit_is_not_trusted() -> None:
    e = evaluation(record=good_record() | {"state": "timeout", "exit_code": None, "signal": 9})
    assert e.failure_class == "timeout" and e.correct and codes(e) == ["failed"]


def test_a_record_of_the_wrong_shape_is_an_error_not_a_key_error() -> None:
    for record in ({"id": 5}, {"regions": "none"}, {"regions": [{"region": 7, "integrity": "clean"}]}, [1]):
        with pytest.raises(EvaluationError):
            evaluation_of(record, printed(good_line()))  # type: ignore[arg-type]


def test_the_line_the_runtime_kept_in_the_record() -> None:
    e = evaluation_of(good_record() | {"evaluation": good_line()}, None)
    assert e.trusted and e.candidate == "19_ReLU.v2.py"
    # Output the client missed: the runtime's line stands in for it.
    assert evaluation_of(good_record() | {"evaluation": good_line()}, "partial\n").trusted
    bad = good_record() | {"evaluation": {"schema": 1}}
    with pytest.raises(EvaluationError, match="required key is missing"):
        evaluation_of(bad, None)
    assert evaluation_of(bad, "no line\n").failure_class == "runtime_error"
    summary = good_record() | {"evaluation": {"problem": "19_ReLU.py", "correct": True, "speedup": 2.0}}
    with pytest.raises(EvaluationError, match="a summary of the result line"):
        evaluation_of(summary, None)
    assert evaluation_of(summary, printed(good_line())).trusted  # the stdout's line is read


def test_summary_counts_each_problem_by_its_best_correct_candidate() -> None:
    def one(problem: str, speedup: float | None, correct: bool = True, trusted: bool = True,
            failure: str | None = None) -> Evaluation:
        e = evaluation()
        return evaluation_from_dict(e.to_dict() | {
            "problem": problem, "speedup": speedup, "correct": correct, "trusted": trusted, "failure_class": failure,
            "review": bool(speedup and speedup > 10)})

    done = [one("a", 0.5), one("a", 1.6), one("b", 3.0, trusted=False), one("c", None, False, False, "compile_error"),
            one("d", 0.9), one("d", None, False, False, "incorrect"), one("e", 12.0)]
    s = summarize(done)
    assert s["problems"] == 5 and s["evaluations"] == 7 and s["correct"] == 5
    assert s["correct_pct"] == pytest.approx(80.0)
    assert s["fast_p"] == {"0": 0.8, "1": 0.6, "1.5": 0.6, "2": 0.4}
    assert s["fast_p_trusted"] == {"0": 0.6, "1": 0.4, "1.5": 0.4, "2": 0.2}
    assert s["median_speedup"] == pytest.approx(1.6) and s["untrusted"] == 1 and s["review"] == 1
    assert s["failures"] == {"compile_error": 1, "incorrect": 1}
    assert summarize([])["problems"] == 0


# --- through a real runtime --------------------------------------------------------------


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("eval") / "rt", policy="krex", sim=1, slots=8,
                              extra_config=regions_config())


@pytest.fixture
def files(tmp_path: Path) -> Any:
    (tmp_path / "suite").mkdir()
    (tmp_path / "cands").mkdir()
    problem = tmp_path / "suite" / "19_ReLU.py"
    problem.write_text("class Model: ...\n")

    def candidate(what: str, name: str = "19_ReLU.py") -> Path:
        path = tmp_path / "cands" / name
        path.write_text(f"# fake: {what}\nclass ModelNew: ...\n")
        return path

    return problem, candidate


def test_a_correct_candidate_through_the_runtime(rt: Runtime, files: Any) -> None:
    problem, candidate = files
    with rt.client() as client:
        e = client.evaluate(problem, candidate("correct"), harness=FAKE, trials=20, batch="t", timeout=60)
    assert e.correct and e.failure_class is None and e.label == "eval:t/19_ReLU/19_ReLU"
    assert e.speedup is not None and e.speedup > 1 and e.phases_s["queue"] >= 0
    assert [(r.role, r.verdict) for r in e.regions] == [("reference", "verified"), ("candidate", "verified")]
    assert all(r.integrity and r.integrity["clean"] and r.integrity["windows"] == 20 for r in e.regions)
    if e.times_from == "below":  # a runtime that records the windows' times from below
        assert e.trusted, e.untrusted_reasons
    else:  # one that does not: the harness's times are shown, and not trusted
        assert e.times_from == "harness" and codes(e) == ["timing_missing", "timing_missing"]


def test_the_line_is_read_against_the_record(rt: Runtime, files: Any) -> None:
    problem, candidate = files
    with rt.client() as client:
        outside = client.evaluate(problem, candidate("no_region"), harness=FAKE, trials=5, timeout=60)
        assert outside.correct and not outside.trusted and codes(outside)[:2] == ["region_missing"] * 2
        liar = client.evaluate(problem, candidate("liar"), harness=FAKE, trials=5, timeout=60)
        if liar.times_from == "below":  # the speedup reported is below's, not the one the harness claims
            claimed = liar.harness_timing["reference"]["median_ms"] / liar.harness_timing["candidate"]["median_ms"]
            assert "timer_mismatch" in codes(liar) and liar.speedup is not None and liar.speedup < claimed / 2
        wrong = client.evaluate(problem, candidate("incorrect"), harness=FAKE, timeout=60)
        assert wrong.failure_class == "incorrect" and wrong.correct is False and wrong.check is not None
        broken = client.evaluate(problem, candidate("compile"), harness=FAKE, timeout=60)
        assert broken.failure_class == "compile_error" and "expected" in broken.failure_detail


def test_a_crash_a_timeout_and_a_malformed_line(rt: Runtime, files: Any) -> None:
    problem, candidate = files
    with rt.client() as client:
        crash = client.evaluate(problem, candidate("crash"), harness=FAKE, timeout=60)
        assert crash.failure_class == "runtime_error" and crash.failure_message == "the harness exited with 3"
        assert "RuntimeError: boom" in crash.failure_detail and crash.exit_code == 3
        hang = client.evaluate(problem, candidate("hang"), harness=FAKE, timeout=2)
        assert hang.state == "timeout" and hang.failure_class == "timeout" and not hang.trusted
        with pytest.raises(EvaluationError, match=r"eval:cands/19_ReLU/19_ReLU\): the result line is malformed: "
                                                  r"check.passed: expected an integer"):
            client.evaluate(problem, candidate("malformed"), harness=FAKE, timeout=60)
        with pytest.raises(EvaluationError, match="not JSON"):
            client.evaluate(problem, candidate("not_json"), harness=FAKE, timeout=60)
        with pytest.raises(FileNotFoundError, match="no candidate file"):
            client.evaluate(problem, problem.parent / "missing.py", harness=FAKE)


def test_evaluate_many_yields_each_as_it_ends_and_goes_on_past_a_bad_line(rt: Runtime, files: Any) -> None:
    problem, candidate = files
    pairs = [(problem, candidate("correct", "19_ReLU.py")), (problem, candidate("malformed", "19_ReLU.v2.py")),
             (problem, candidate("incorrect", "19_ReLU.v3.py"))]

    async def gather() -> list[Evaluation]:
        async with AsyncClient(f"ipc://{rt.run_dir / 'control.sock'}") as client:
            return [e async for e in client.evaluate_many(pairs, harness=FAKE, trials=5, max_in_flight=2, timeout=60)]

    found = {Path(e.candidate_path).name: e for e in asyncio.run(gather())}
    assert set(found) == {"19_ReLU.py", "19_ReLU.v2.py", "19_ReLU.v3.py"}
    assert found["19_ReLU.py"].correct
    assert found["19_ReLU.v2.py"].failure_class == "runtime_error"
    assert "malformed" in found["19_ReLU.v2.py"].failure_message
    assert found["19_ReLU.v3.py"].failure_class == "incorrect"


def test_the_harness_itself_through_the_runtime(rt: Runtime) -> None:
    """The real harness (krex_runtime.eval.harness) on the CI problem files,
    with the torch stand-in of tests/tenants/torch_on_sim."""
    ci = TENANTS / "eval"
    env = dict(rt.env, PYTHONPATH=str(TENANTS / "torch_on_sim"))
    with rt.client(timeout_s=60) as client:
        honest = client.evaluate(ci / "relu_add.py", ci / "relu_add__torch.py", env=env, trials=10, timeout=120)
        assert honest.correct and honest.failure_class is None, (honest.failure_message, honest.failure_detail)
        assert [r.verdict for r in honest.regions] == ["verified", "verified"] and honest.speedup is not None
        if honest.times_from == "below":
            assert honest.trusted, honest.untrusted_reasons
        else:
            assert codes(honest) == ["timing_missing", "timing_missing"]
        cached = client.evaluate(ci / "relu_add.py", ci / "relu_add__cached.py", env=env, trials=10, timeout=120)
        assert cached.failure_class == "incorrect" and "fresh_check_failed" in codes(cached)
        broken = client.evaluate(ci / "relu_add.py", ci / "relu_add__compile_error.py", env=env, timeout=120)
        assert broken.failure_class == "compile_error" and broken.compiled is False and broken.failure_detail


def test_a_flagged_record_and_a_time_limit_from_real_candidate_files(rt: Runtime) -> None:
    """The two failure classes the harness never prints, each from a real
    candidate through the runtime: `integrity_flagged` (right values, its work
    on a side stream never joined: the region's record says `escaped`) and
    `timeout` (a forward that never returns: the command's time limit)."""
    ci = TENANTS / "eval"
    env = dict(rt.env, PYTHONPATH=str(TENANTS / "torch_on_sim"))
    with rt.client(timeout_s=60) as client:
        flagged = client.evaluate(ci / "relu_add.py", ci / "relu_add__unjoined.py", env=env, trials=5, timeout=120)
        assert flagged.correct and flagged.failure_class == "integrity_flagged", (flagged.failure_message,
                                                                                  flagged.failure_detail)
        assert "escaped" in flagged.failure_message and not flagged.trusted
        hung = client.evaluate(ci / "relu_add.py", ci / "relu_add__hangs.py", env=env, trials=5, timeout=15)
        assert hung.failure_class == "timeout" and not hung.trusted, (hung.failure_message, hung.failure_detail)


def test_krex_eval_says_where_the_time_went() -> None:
    from krex_runtime.cli.eval_command import evaluation_lines

    e = evaluation(record=good_record() | {"queue_s": 1.5, "run_s": 9.25})
    time_line = next(line for line in evaluation_lines(e) if line.startswith("time"))
    assert time_line.startswith("time     queued 1.50 s · load ") and time_line.endswith("(ran 9.25 s)"), time_line
    for name in ("compile slot", "compile", "check", "timed"):
        assert f" {name} " in time_line, time_line
