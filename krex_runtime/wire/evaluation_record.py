"""The compact `evaluation` object a command's result record, its
`command_finished` event, snapshots and `ls` rows carry: what the runtime
keeps of the harness's result line (read by wire/evaluation.py's
`parse_line`), and the one word tables show for it.

Standard library only: the runtime makes it, the console and the CLI show
it. It is a summary, with no `schema`: a client that wants the whole line
reads the command's stdout (wire/evaluation.py does).
"""

from __future__ import annotations

from typing import Any

# What the compact object keeps of a text: a message is one line of at most this.
MESSAGE_CHARS = 200
PATCHED_KEPT = 16


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """What a command's record keeps of a result line (as a dict, `failure.class`
    named so): the outcome, the harness's medians, the speedup when both were
    timed, the region ids."""
    failure = result.get("failure") or {}
    timing = result.get("timing") or {}
    reference, candidate = timing.get("reference") or {}, timing.get("candidate") or {}
    ref_ms, cand_ms = reference.get("median_ms"), candidate.get("median_ms")
    fresh = result.get("fresh_check")
    message = " ".join(str(failure.get("message", "")).split())[:MESSAGE_CHARS]
    return {
        "problem": str(result["problem"])[:MESSAGE_CHARS], "candidate": str(result["candidate"])[:MESSAGE_CHARS],
        "compiled": result["compiled"], "correct": result.get("correct"),
        "failure": failure.get("class"), "message": message,
        "reference_ms": ref_ms, "candidate_ms": cand_ms,
        "speedup": ref_ms / cand_ms if ref_ms is not None and cand_ms else None,
        "regions": [reference.get("region"), candidate.get("region")] if timing else [],
        "fresh_check": fresh["passed"] if isinstance(fresh, dict) else None,
        "harness_patched": [str(p)[:MESSAGE_CHARS] for p in list(result.get("harness_patched") or [])[:PATCHED_KEPT]],
    }


def outcome(evaluation: dict[str, Any]) -> str:
    """One short word for a table: `1.52x` (correct and timed), `correct`,
    the failure's class, or `n/a`."""
    if evaluation.get("failure"):
        return str(evaluation["failure"])
    if evaluation.get("correct") is True:
        speedup = evaluation.get("speedup")
        return f"{speedup:.2f}x" if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) else "correct"
    return "n/a"
