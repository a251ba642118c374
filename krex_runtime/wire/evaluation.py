"""A candidate kernel's evaluation (docs/evaluation.md): the harness's result
line read strictly (`parse_line`), the `Evaluation` a client, the console or
the runtime builds of one command's record and output (`evaluation_of`), the
`trusted` rule, and the fast_p summary of many (`summarize`).

The harness prints its result as the last line of its stdout, `KREX-EVAL-RESULT
{json}` (schema 1). The times a client reports are not the harness's own but
those taken from below: the interception library's elapsed times of the
windows judged inside each of the line's regions, which the runtime puts in
the region's record (`integrity.timing`). The harness's numbers are kept
beside them, and a disagreement makes the result untrusted.

Plain data in, plain data out (standard library only): a record as the
runtime sends it, never a client's dataclass.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from krex_runtime.wire.eval_line import (
    FAILURE_CLASSES,
    MARKER,
    SCHEMA,
    EvaluationError,
    Failure,
    HarnessReport,
    Times,
    parse_line,
    report_of,
)

__all__ = ["FAILURE_CLASSES", "MARKER", "SCHEMA", "Evaluation", "EvaluationError", "HarnessReport", "Pair",
           "RegionCheck", "evaluation_from_dict", "evaluation_of", "parse_line", "report_of", "summarize",
           "untrusted_reasons"]

FLAG_SPEEDUP = 10.0  # a speedup over this asks for a person's review
TIMER_TOLERANCE = 0.02  # the harness's median may differ this much from the one taken from below
DETAIL_LINES = 20
FAST_P = (0.0, 1.0, 1.5, 2.0)


# --- one evaluation ----------------------------------------------------------------


@dataclass(frozen=True)
class RegionCheck:
    """One region the line names, as the runtime recorded it."""

    role: str  # reference | candidate
    region: int | None
    verdict: str | None  # verified / violated / unknown; None: not in the record
    integrity: Mapping[str, Any] | None  # the record's integrity (windows, clean, summary, flags, timing)


@dataclass(frozen=True)
class Evaluation:
    """One problem and candidate, evaluated by one command.

    reference_ms, candidate_ms and speedup are taken from below (the
    regions' `integrity.timing` medians); `times_from` says "below", or
    "harness" when the runtime recorded none (then the result is untrusted),
    or "" without timing. The harness's own TIMES are `harness_timing`."""

    command_id: str
    label: str
    state: str  # the command's: finished | timeout | cancelled | failed
    problem: str
    candidate: str
    problem_sha256: str
    candidate_sha256: str
    compiled: bool | None
    correct: bool | None
    failure_class: str | None
    failure_message: str
    failure_detail: str
    check: Mapping[str, Any] | None
    fresh_check: Mapping[str, Any] | None
    reference_ms: float | None
    candidate_ms: float | None
    speedup: float | None
    times_from: str
    reference_timing: Mapping[str, Any] | None  # from below
    candidate_timing: Mapping[str, Any] | None
    harness_timing: Mapping[str, Any] | None  # the line's {"reference": TIMES, "candidate": TIMES}
    regions: tuple[RegionCheck, ...]
    trusted: bool
    untrusted_reasons: tuple[str, ...]
    review: bool
    review_reason: str
    phases_s: Mapping[str, float]  # the harness's phases, and the command's queue and run
    harness_patched: tuple[str, ...]
    exit_code: int | None
    signal: int | None
    problem_path: str = ""  # as the client named the files; "" when built from a record alone
    candidate_path: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["regions"] = [asdict(r) for r in self.regions]
        return data


@dataclass(frozen=True)
class Pair:
    """What the client knows of the files it sent: their paths and sha256."""

    problem: str
    candidate: str
    problem_sha256: str = ""
    candidate_sha256: str = ""


def evaluation_of(record: Mapping[str, Any], stdout: str | None, flag_speedup: float = FLAG_SPEEDUP, *,
                  stderr: str = "", pair: Pair | None = None) -> Evaluation:
    """The Evaluation of one ended command: its result record as the runtime
    sends it (`id`, `state`, `exit_code`, `signal`, `regions`, ...) and its
    stdout (None: the record's own `evaluation`, the line the runtime kept).
    EvaluationError when its result line is malformed."""
    rec = _Reader(record, "result")
    report = parse_line(stdout) if stdout is not None else None
    if report is None:  # the line the runtime read of the whole output file (a client may have missed some)
        report = _kept(record, strict=stdout is None)
    regions = _region_checks(rec, report)
    failure = _failure(rec, report, regions, stderr)
    correct = report.correct if report is not None else None
    times = _times(report, regions)
    reasons = untrusted_reasons(report, regions, pair)
    if failure is not None and failure.kind != "integrity_flagged" and report is not None and report.correct:
        # A good line from a command that then failed (ran past its limit at exit): the failure is the result.
        reasons.append(f"failed: {failure.kind}")
    speedup = times[2]
    review = speedup is not None and speedup > flag_speedup
    names = _names_of(rec.text("label"), report, pair)
    return Evaluation(
        command_id=rec.text("id"), label=rec.text("label"), state=rec.text("state"),
        problem=names[0], candidate=names[1],
        problem_sha256=report.problem_sha256 if report else (pair.problem_sha256 if pair else ""),
        candidate_sha256=report.candidate_sha256 if report else (pair.candidate_sha256 if pair else ""),
        compiled=report.compiled if report else None, correct=correct,
        failure_class=failure.kind if failure else None, failure_message=failure.message if failure else "",
        failure_detail=failure.detail if failure else "",
        check=asdict(report.check) if report and report.check else None,
        fresh_check=asdict(report.fresh_check) if report and report.fresh_check else None,
        reference_ms=times[0], candidate_ms=times[1], speedup=speedup, times_from=times[3],
        reference_timing=_below(regions, "reference"), candidate_timing=_below(regions, "candidate"),
        harness_timing=asdict(report.timing) if report and report.timing else None,
        regions=tuple(regions), trusted=not reasons, untrusted_reasons=tuple(reasons), review=review,
        review_reason=(f"speedup {speedup:.2f}x is over {flag_speedup:g}x: have a person look at the candidate"
                       if review and speedup is not None else ""),
        phases_s=_phases(rec, report), harness_patched=report.harness_patched if report else (),
        exit_code=rec.integer("exit_code"), signal=rec.integer("signal"),
        problem_path=pair.problem if pair else "", candidate_path=pair.candidate if pair else "",
    )


def untrusted_reasons(report: HarnessReport | None, regions: Sequence[RegionCheck], pair: Pair | None = None
                      ) -> list[str]:
    """Why a result is not to be trusted, one "code: detail" each; [] when it is.
    The rule (docs/evaluation.md): correct; the fresh check passed; no harness
    patched; every region of the evaluation verified, its integrity record
    present and clean, its timing from below present and agreeing with the
    harness's (as many windows as trials, medians within 2%)."""
    if report is None:
        return ["no_result: the command printed no result line"]
    reasons = []
    if report.correct is not True:
        reasons.append("not_correct: the candidate was not found correct")
    if report.fresh_check is None:
        reasons.append("fresh_check_missing: no re-check after the timed trials")
    elif not report.fresh_check.passed:
        reasons.append(f"fresh_check_failed: {report.fresh_check.message or 'the re-check disagreed'}")
    if report.harness_patched:
        reasons.append(f"harness_patched: {', '.join(report.harness_patched)}")
    if pair is not None:
        for what, known, said in (("problem", pair.problem_sha256, report.problem_sha256),
                                  ("candidate", pair.candidate_sha256, report.candidate_sha256)):
            if known and known != said:
                reasons.append(f"sha_mismatch: the harness evaluated another {what} file than the one sent")
    if report.timing is None:
        if report.correct is True:
            reasons.append("timing_missing: the result line has no timing")
        return reasons
    for check in regions:
        reasons.extend(_region_reasons(check, getattr(report.timing, check.role)))
    return reasons


def _region_reasons(check: RegionCheck, times: Times) -> list[str]:
    name = f"{check.role} region {check.region}"
    if check.region is None:
        return [f"region_missing: the {check.role} was not timed in a region"]
    if check.verdict is None:
        return [f"region_missing: {name} is not in the command's record"]
    reasons = []
    if check.verdict != "verified":
        reasons.append(f"region_not_verified: {name} is {check.verdict}")
    integrity = check.integrity
    if integrity is None:
        return reasons + [f"integrity_missing: {name} has no integrity record"]
    if not integrity.get("clean"):
        reasons.append(f"integrity_flagged: {name}: {integrity.get('summary') or 'not clean'}")
    timing = integrity.get("timing")
    if not isinstance(timing, Mapping) or not _number(timing.get("median_ms")):
        return reasons + [f"timing_missing: {name} has no timing from below"]
    windows = timing.get("windows")
    if windows != times.trials:
        reasons.append(f"timer_mismatch: {name}: {windows} windows from below for {times.trials} trials")
    below = float(timing["median_ms"])
    if abs(times.median_ms - below) > TIMER_TOLERANCE * below:
        reasons.append(f"timer_mismatch: {name}: the harness's median {times.median_ms:.4g} ms, "
                       f"{below:.4g} ms from below")
    return reasons


def _failure(rec: _Reader, report: HarnessReport | None, regions: Sequence[RegionCheck], stderr: str
             ) -> Failure | None:
    state = rec.text("state")
    if state == "timeout":
        return Failure("timeout", f"ran past its time limit{_said(rec.text('reason'))}", _tail(stderr))
    if report is None:
        code, sig = rec.integer("exit_code"), rec.integer("signal")
        if state == "cancelled" or (state == "failed" and code is None and not sig):  # failed: could not start
            how = f"was {state}{_said(rec.text('reason'))}"
        elif sig:
            how = f"killed by signal {sig}"
        else:
            how = f"exited with {code}" + (" without a result line" if code == 0 else "")
        return Failure("runtime_error", f"the harness {how}", _tail(stderr))
    if report.failure is not None:
        return report.failure
    if report.correct is False:
        return Failure("incorrect", "the harness found the candidate incorrect")
    if report.correct is None:
        return Failure("runtime_error", "the harness stopped before the correctness check", _tail(stderr))
    flagged = [r for r in regions if r.integrity is not None and not r.integrity.get("clean")]
    if flagged:
        said = "; ".join(f"{r.role} region {r.region}: {r.integrity.get('summary') if r.integrity else ''}"
                         for r in flagged)
        return Failure("integrity_flagged", said)
    return None


def _region_checks(rec: _Reader, report: HarnessReport | None) -> list[RegionCheck]:
    if report is None or report.timing is None:
        return []
    recorded = rec.regions()
    checks = []
    for role in ("reference", "candidate"):
        region = getattr(report.timing, role).region
        found = [r for r in recorded if r.get("region") == region] if region is not None else []
        # A region over a set of GPUs has one record per GPU: the worst verdict, a flagged integrity if any.
        verdict = None
        if found:
            verdicts = [str(r.get("verdict") or "unknown") for r in found]
            verdict = next((v for v in ("violated", "unknown") if v in verdicts), verdicts[0])
        integrities = [r.get("integrity") for r in found]
        integrity = next((i for i in integrities if isinstance(i, Mapping) and not i.get("clean")),
                         integrities[0] if integrities else None)
        checks.append(RegionCheck(role, region, verdict, integrity if isinstance(integrity, Mapping) else None))
    return checks


def _below(regions: Sequence[RegionCheck], role: str) -> Mapping[str, Any] | None:
    for r in regions:
        timing = r.integrity.get("timing") if r.role == role and r.integrity else None
        if isinstance(timing, Mapping) and _number(timing.get("median_ms")):
            return dict(timing)
    return None


def _times(report: HarnessReport | None, regions: Sequence[RegionCheck]
           ) -> tuple[float | None, float | None, float | None, str]:
    """Reference and candidate medians and the speedup: from below, else the harness's."""
    if report is None or report.timing is None:
        return None, None, None, ""
    ref, cand = _below(regions, "reference"), _below(regions, "candidate")
    if ref is not None and cand is not None:
        r, c, source = float(ref["median_ms"]), float(cand["median_ms"]), "below"
    else:
        r, c, source = report.timing.reference.median_ms, report.timing.candidate.median_ms, "harness"
    return r, c, (r / c if c > 0 else None), source


def _phases(rec: _Reader, report: HarnessReport | None) -> dict[str, float]:
    phases = dict(report.phases_s) if report else {}
    for key, name in (("queue_s", "queue"), ("run_s", "run")):
        value = rec.number(key)
        if value is not None:
            phases[name] = value
    return phases


def _names_of(label: str, report: HarnessReport | None, pair: Pair | None) -> tuple[str, str]:
    if report is not None:
        return report.problem, report.candidate
    if pair is not None:
        return pair.problem.rsplit("/", 1)[-1], pair.candidate.rsplit("/", 1)[-1]
    parts = label.removeprefix("eval:").split("/")  # eval:<batch>/<problem>/<candidate>
    return (f"{parts[1]}.py", f"{parts[2]}.py") if label.startswith("eval:") and len(parts) == 3 else ("", "")


def _kept(record: Mapping[str, Any], strict: bool) -> HarnessReport | None:
    """The record's `evaluation` when it is the whole line; a runtime that keeps
    only a summary of it (no `schema`) leaves the line to be read from stdout."""
    kept = record.get("evaluation")
    try:
        if isinstance(kept, Mapping) and "schema" not in kept:
            raise EvaluationError("the record keeps a summary of the result line, not the line: "
                                  "read the command's stdout")
        return report_of(kept) if kept is not None else None
    except EvaluationError:
        if strict:
            raise
        return None


def _tail(text: str) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-DETAIL_LINES:])


def _said(reason: str) -> str:
    return f": {reason}" if reason else ""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class _Reader:
    """A record's fields, each of its type or the empty value: a field of
    another type is an EvaluationError naming it, never a KeyError."""

    def __init__(self, record: Any, what: str) -> None:
        if not isinstance(record, Mapping):
            raise EvaluationError(f"the {what} record is not an object")
        self.record, self.what = record, what

    def _get(self, key: str, ok: bool, kind: str) -> Any:
        if not ok:
            raise EvaluationError(f"the {self.what} record's {key} is not {kind}")
        return self.record.get(key)

    def text(self, key: str) -> str:
        v = self.record.get(key)
        return str(self._get(key, v is None or isinstance(v, str), "a string") or "")

    def integer(self, key: str) -> int | None:
        v = self.record.get(key)
        ok = v is None or (isinstance(v, int) and not isinstance(v, bool))
        self._get(key, ok, "an integer")
        return int(v) if v is not None else None

    def number(self, key: str) -> float | None:
        v = self.record.get(key)
        self._get(key, v is None or _number(v), "a number")
        return float(v) if v is not None else None

    def regions(self) -> list[Mapping[str, Any]]:
        v = self.record.get("regions") or []
        ok = isinstance(v, list) and all(isinstance(r, Mapping) for r in v)
        self._get("regions", ok, "a list of objects")
        for r in v:
            integrity = r.get("integrity")
            if integrity is not None and not isinstance(integrity, Mapping):
                raise EvaluationError(f"the {self.what} record's region {r.get('region')!r} integrity is not an object")
        return list(v)


# --- many ----------------------------------------------------------------------------


def summarize(evaluations: Iterable[Evaluation]) -> dict[str, Any]:
    """The batch in numbers, KernelBench's way: fast_p is the fraction of
    PROBLEMS with a correct candidate whose speedup is over p. A problem with
    several candidates counts once, by its best correct candidate (the
    highest speedup); `fast_p_trusted` counts trusted candidates only.
    `correct_pct`: problems with a correct candidate; `median_speedup`: over
    every correct evaluation; `untrusted`: correct evaluations not trusted."""
    done = list(evaluations)
    problems = sorted({e.problem for e in done})
    best: dict[str, float] = {}
    best_trusted: dict[str, float] = {}
    for e in done:
        if e.correct and e.speedup is not None:
            best[e.problem] = max(best.get(e.problem, 0.0), e.speedup)
            if e.trusted:
                best_trusted[e.problem] = max(best_trusted.get(e.problem, 0.0), e.speedup)
    correct_problems = {e.problem for e in done if e.correct}
    speedups = [e.speedup for e in done if e.correct and e.speedup is not None]
    failures: dict[str, int] = {}
    for e in done:
        if e.failure_class:
            failures[e.failure_class] = failures.get(e.failure_class, 0) + 1
    n = len(problems)
    return {
        "problems": n,
        "evaluations": len(done),
        "correct": sum(1 for e in done if e.correct),
        "correct_pct": 100.0 * len(correct_problems) / n if n else 0.0,
        "fast_p": {f"{p:g}": sum(1 for s in best.values() if s > p) / n if n else 0.0 for p in FAST_P},
        "fast_p_trusted": {f"{p:g}": sum(1 for s in best_trusted.values() if s > p) / n if n else 0.0
                           for p in FAST_P},
        "median_speedup": statistics.median(speedups) if speedups else None,
        "untrusted": sum(1 for e in done if e.correct and not e.trusted),
        "review": sum(1 for e in done if e.review),
        "failures": dict(sorted(failures.items())),
    }


def evaluation_from_dict(data: Mapping[str, Any]) -> Evaluation:
    """An Evaluation written with to_dict (a results file read again)."""
    try:
        fields = dict(data)
        fields["regions"] = tuple(RegionCheck(**r) for r in fields.get("regions") or ())
        fields["untrusted_reasons"] = tuple(fields.get("untrusted_reasons") or ())
        fields["harness_patched"] = tuple(fields.get("harness_patched") or ())
        known = set(Evaluation.__dataclass_fields__)
        return Evaluation(**{k: v for k, v in fields.items() if k in known})
    except TypeError as exc:
        raise EvaluationError(f"not an evaluation: {exc}") from None
