"""The evaluation harness's result line (`KREX-EVAL-RESULT <json>`, schema 1),
parsed strictly, and the compact `evaluation` object a command's result
record, its `command_finished` event and `krex ls` carry.

Standard library only: the runtime reads the line, the console and the CLI
show the compact object. A line that does not fit the schema is no result
(`parse_line` raises ValueError); nothing in it is trusted beyond its shape.
"""

from __future__ import annotations

import json
import math
from typing import Any

MARKER = "KREX-EVAL-RESULT"
SCHEMA = 1
FAILURE_CLASSES = ("compile_error", "runtime_error", "wrong_shape", "wrong_dtype", "incorrect", "timeout",
                   "out_of_memory", "integrity_flagged")
# What the compact object keeps of a text: a message is one line of at most this.
MESSAGE_CHARS = 200
PATCHED_KEPT = 16


def parse_line(line: str) -> dict[str, Any]:
    """The result line's object, checked against schema 1 (ValueError: not one)."""
    head, _, text = line.strip().partition(" ")
    if head != MARKER:
        raise ValueError(f"not a {MARKER} line")
    result = json.loads(text)
    if not isinstance(result, dict) or result.get("schema") != SCHEMA:
        raise ValueError(f"not a schema {SCHEMA} result")
    for key in ("problem", "candidate"):
        _need(isinstance(result.get(key), str), key)
    _need(isinstance(result.get("compiled"), bool), "compiled")
    _need(result.get("correct") is None or isinstance(result.get("correct"), bool), "correct")
    failure = result.get("failure")
    _need(failure is None or (isinstance(failure, dict) and failure.get("class") in FAILURE_CLASSES
                              and isinstance(failure.get("message", ""), str)), "failure")
    timing = result.get("timing")
    _need(timing is None or (isinstance(timing, dict) and all(_times(timing.get(k)) for k in ("reference", "candidate"))),
          "timing")
    fresh = result.get("fresh_check")
    _need(fresh is None or (isinstance(fresh, dict) and isinstance(fresh.get("passed"), bool)), "fresh_check")
    patched = result.get("harness_patched", [])
    _need(isinstance(patched, list) and all(isinstance(p, str) for p in patched), "harness_patched")
    return result


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """What a command's record keeps of a parsed result: the outcome, the
    harness's medians, the speedup when both were timed, the region ids."""
    failure = result.get("failure") or {}
    timing = result.get("timing") or {}
    reference, candidate = timing.get("reference") or {}, timing.get("candidate") or {}
    ref_ms, cand_ms = reference.get("median_ms"), candidate.get("median_ms")
    fresh = result.get("fresh_check")
    message = " ".join(str(failure.get("message", "")).split())[:MESSAGE_CHARS]
    return {
        "problem": result["problem"][:MESSAGE_CHARS], "candidate": result["candidate"][:MESSAGE_CHARS],
        "compiled": result["compiled"], "correct": result.get("correct"),
        "failure": failure.get("class"), "message": message,
        "reference_ms": ref_ms, "candidate_ms": cand_ms,
        "speedup": ref_ms / cand_ms if ref_ms is not None and cand_ms else None,
        "regions": [reference.get("region"), candidate.get("region")] if timing else [],
        "fresh_check": fresh["passed"] if isinstance(fresh, dict) else None,
        "harness_patched": [p[:MESSAGE_CHARS] for p in result.get("harness_patched", [])[:PATCHED_KEPT]],
    }


def outcome(evaluation: dict[str, Any]) -> str:
    """One short word for a table: `1.52x` (correct and timed), `correct`,
    the failure's class, or `n/a`."""
    if evaluation.get("failure"):
        return str(evaluation["failure"])
    if evaluation.get("correct") is True:
        speedup = evaluation.get("speedup")
        return f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else "correct"
    return "n/a"


def _times(times: Any) -> bool:
    if not isinstance(times, dict):
        return False
    median, region = times.get("median_ms"), times.get("region")
    return (isinstance(median, (int, float)) and not isinstance(median, bool) and math.isfinite(median)
            and median > 0 and (region is None or (isinstance(region, int) and not isinstance(region, bool))))


def _need(ok: bool, key: str) -> None:
    if not ok:
        raise ValueError(f"{key} does not fit schema {SCHEMA}")
