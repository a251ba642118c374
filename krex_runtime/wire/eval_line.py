"""The result line the evaluation harness prints as the last line of its
stdout, `KREX-EVAL-RESULT {json}` (schema 1, docs/evaluation.md), read
strictly: `parse_line` gives the `HarnessReport` field for field, or an
EvaluationError naming the field that does not fit. Standard library only:
the runtime, the console and every client read the line with it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.wire.typed import ShapeError, from_dict, to_dict

MARKER = "KREX-EVAL-RESULT "
SCHEMA = 1
FAILURE_CLASSES = ("compile_error", "runtime_error", "wrong_shape", "wrong_dtype", "incorrect", "timeout",
                   "out_of_memory", "integrity_flagged")


class EvaluationError(ValueError):
    """A result line that is not one of schema 1: says which field and why."""


# --- the result line ---------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    kind: str  # "class" on the line: one of FAILURE_CLASSES
    message: str
    detail: str = ""


@dataclass(frozen=True)
class Check:
    input_sets: int
    passed: int
    atol: float
    rtol: float
    dtype: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    failed_set: int | None = None


@dataclass(frozen=True)
class FreshCheck:
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    message: str = ""


@dataclass(frozen=True)
class Times:
    region: int | None
    trials: int
    median_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    std_ms: float
    stream: str = "0"


@dataclass(frozen=True)
class Timing:
    reference: Times
    candidate: Times


@dataclass(frozen=True)
class HarnessReport:
    """The result line, as the harness printed it (field for field; `failure.kind` is its "class")."""

    schema: int
    problem: str
    candidate: str
    problem_sha256: str
    candidate_sha256: str
    compiled: bool
    correct: bool | None
    failure: Failure | None = None
    check: Check | None = None
    fresh_check: FreshCheck | None = None
    timing: Timing | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    harness_patched: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As on the line (`failure.class`), ready for JSON."""
        data: dict[str, Any] = to_dict(self)
        if self.failure is not None:
            data["failure"] = {"class": self.failure.kind, "message": self.failure.message,
                               "detail": self.failure.detail}
        return data


_NULLABLE: dict[str, type] = {"failure": Failure, "check": Check, "fresh_check": FreshCheck, "timing": Timing}


def parse_line(text: str) -> HarnessReport | None:
    """The result of a command's stdout (or of one line): its last non-empty
    line when that is a result line, else None. EvaluationError when the line
    is one but malformed (not JSON, another schema, a field missing or of
    another type); the message names the field."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[-1].startswith(MARKER):
        return None
    try:
        data = json.loads(lines[-1][len(MARKER):])
    except ValueError as exc:
        raise EvaluationError(f"the result line is not JSON: {exc}") from None
    return report_of(data)


def report_of(data: Any) -> HarnessReport:
    """A result line's JSON (or a record's `evaluation`, the same) read strictly."""
    if not isinstance(data, dict):
        raise EvaluationError("the result line is not a JSON object")
    if data.get("schema") != SCHEMA:
        raise EvaluationError(f"the result line is of schema {data.get('schema')!r}, this client reads {SCHEMA}")
    data = dict(data)
    failure = data.get("failure")
    if isinstance(failure, dict):  # "class" is Python's word: the dataclass says kind
        failure = dict(failure)
        if "class" in failure:
            failure["kind"] = failure.pop("class")
        data["failure"] = failure
    try:
        # Keys a later harness adds are left out; a key of schema 1 must have its type. The objects that
        # may be null are read apart, so that an error names the field inside them ("check.passed").
        parts: dict[str, Any] = {key: None if data.get(key) is None else from_dict(cls, data[key], key, ignore_unknown=True)
                                 for key, cls in _NULLABLE.items()}
        report = from_dict(HarnessReport, {k: v for k, v in data.items() if k not in _NULLABLE}, ignore_unknown=True)
    except ShapeError as exc:
        raise EvaluationError(f"the result line is malformed: {exc}".replace("failure.kind:", "failure.class:")) from None
    report = dataclasses.replace(report, **parts)
    if report.failure is not None and report.failure.kind not in FAILURE_CLASSES:
        raise EvaluationError(f"the result line is malformed: failure.class: {report.failure.kind!r} "
                              f"is none of {', '.join(FAILURE_CLASSES)}")
    return report
