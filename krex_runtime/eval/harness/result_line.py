"""The result (schema 1, docs/evaluation.md) and the one line that carries it.

The line must be the LAST line of the command's stdout, whatever the
candidate prints (from Python, from C's stdio, from a compiler it runs, from
a thread still running at the end). So, first thing, the harness keeps a
private copy of its stdout and points descriptor 1 at stderr: everything
else written to "stdout" goes to stderr, and the result line alone is
written to the private copy, after every stdio buffer has been flushed.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.eval.harness.failures import Failure

MARKER = "KREX-EVAL-RESULT"
SCHEMA = 1
PHASES = ("load", "compile_wait", "compile", "check", "timed")


@dataclass
class Report:
    problem: str
    candidate: str
    problem_sha256: str
    candidate_sha256: str
    compiled: bool = False
    correct: bool | None = None
    failure: Failure | None = None
    check: dict[str, Any] | None = None
    fresh_check: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    phases_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    harness_patched: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "problem": self.problem, "candidate": self.candidate,
            "problem_sha256": self.problem_sha256, "candidate_sha256": self.candidate_sha256,
            "compiled": self.compiled, "correct": self.correct,
            "failure": None if self.failure is None else self.failure.as_json(),
            "check": self.check, "fresh_check": self.fresh_check, "timing": self.timing,
            "phases_s": {k: round(self.phases_s.get(k, 0.0), 6) for k in PHASES},
            "harness_patched": list(self.harness_patched),
        }


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a non-finite figure is unknown (null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def line(report: Report) -> str:
    body = json.dumps(_finite(report.as_json()), separators=(",", ":"), allow_nan=False)
    return f"{MARKER} {body}"


class ResultChannel:
    """The command's real stdout, kept for the result line alone."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._fd = os.dup(1)
        os.set_inheritable(self._fd, False)
        os.dup2(2, 1)  # the candidate's prints, and its compilers', now go to stderr

    def emit(self, report: Report) -> None:
        _flush_everything()
        data = (line(report) + "\n").encode()
        while data:
            data = data[os.write(self._fd, data):]
        os.close(self._fd)


def _flush_everything() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a stream the candidate closed: nothing of it to keep
    try:
        ctypes.CDLL(None).fflush(None)  # C's stdio buffers (a C extension's printf)
    except (OSError, AttributeError):
        pass
