"""Node state and the one reducer that folds events into it.

The runtime applies every event it emits here to build its snapshots; the
console applies the events it receives, and replay applies a trace's events,
with this same function. Events arrive as plain dicts (they are JSON lines in
the trace); wire/state/events.py defines them, wire/state/reducer.py folds each type, and
wire/state/model.py holds the state's classes, which this module gathers for readers.

`apply` updates the state in place and returns it; `clone` makes the deep copy
a caller that needs an older state keeps.
"""

from __future__ import annotations

import copy
from collections import deque
from typing import Any

from krex_runtime.wire.state.event_check import UnknownEvent
from krex_runtime.wire.state.events import EVENTS
from krex_runtime.wire.state.model import CommandInfo, GpuState, NodeState
from krex_runtime.wire.state.reducer import REDUCERS


def apply(state: NodeState, event: dict[str, Any]) -> NodeState:
    """Fold one event (its wire dict) into `state` (in place) and return it."""
    reducer = REDUCERS.get(EVENTS.get(event.get("type", "")))  # type: ignore[arg-type]
    if reducer is None:
        raise UnknownEvent(f"unknown event type {event.get('type')!r}")
    reducer(state, event)
    state.seq = event.get("seq", state.seq)
    state.time = event.get("t", state.time)
    return state


def to_snapshot(state: NodeState) -> dict[str, Any]:
    """Plain data for the PUB socket and the snapshot request."""
    return {
        "node": state.node,
        "policy": state.policy,
        "pid": state.pid,
        "started_at": state.started_at,
        "stopping": state.stopping,
        "paused": state.paused,
        "seq": state.seq,
        "time": state.time,
        "gpus": [copy.deepcopy(vars(g)) for g in state.gpus.values()],
        "commands": [vars(c) | {"argv": list(c.argv)} for c in state.commands.values()],
        "queue": list(state.queue),
        "totals": dict(state.totals),
        "keep_finished": state.keep_finished,
    }


def from_snapshot(data: dict[str, Any]) -> NodeState:
    """Rebuild a state from a snapshot, so a late subscriber can apply newer events."""
    commands = {c["id"]: CommandInfo(**c) for c in data["commands"]}
    finished = sorted(
        (c for c in commands.values() if c.finished_at is not None), key=lambda c: c.finished_at or 0.0
    )
    return NodeState(
        node=data["node"],
        policy=data["policy"],
        pid=data["pid"],
        started_at=data["started_at"],
        stopping=data["stopping"],
        paused=data["paused"],
        seq=data["seq"],
        time=data["time"],
        gpus={g["index"]: GpuState(**g) for g in data["gpus"]},
        commands=commands,
        queue=list(data["queue"]),
        totals=dict(data["totals"]),
        keep_finished=data["keep_finished"],
        finished_order=deque(c.id for c in finished),
    )


def clone(state: NodeState) -> NodeState:
    return copy.deepcopy(state)
