"""The states of a command, and how an ended one is named (docs/protocol.md,
"Results"): one rule for the runtime, the reducer (live, snapshots, replay
of any trace) and `ls`."""

from __future__ import annotations


def ended_state(state: str, exit_code: int | None, signal: int | None) -> str:
    """How a command that ended is shown: `finished` only with exit status 0;
    one that exited with another status or was ended by a signal of its own
    (not a timeout, not a cancel) is `failed`, as is one that could not start.
    Runtimes before trace format 5 said `finished` for every exit: their
    records and traces read through this too (docs/protocol.md)."""
    if state == "finished" and (exit_code or signal):
        return "failed"
    return state
