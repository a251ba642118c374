"""The node's event sink: every state change goes through `emit`.

It numbers the event, folds it into the node state with the one reducer (the
same one the console and replay use), appends it to the trace and publishes
it. Snapshots (the state with its sequence number) go out periodically and on
request, so a late subscriber converges (docs/protocol.md). Observers (the
Prometheus exporter's histograms) see each event after it is folded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.state import events
from krex_runtime.wire.state.model import NodeState
from krex_runtime.wire.trace.jsonl import TraceWriter

Publish = Callable[[bytes, Any], None]
Observer = Callable[[dict[str, Any]], None]


class Encoded:
    """A JSON value already encoded: sent as it is, inside a reply or as a
    published message. (Not a dataclass: the envelope's to_dict would take it apart.)"""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class EventLog:
    def __init__(self, trace: TraceWriter, publish: Publish) -> None:
        self.state = NodeState()
        self.trace = trace
        self._publish = publish
        self._seq = 0
        self.observers: list[Observer] = []
        self._encoded: tuple[int, Encoded] | None = None  # the snapshot at one seq, encoded once

    def emit(self, event: events.Event) -> None:
        self._seq += 1
        wire = {"seq": self._seq, "t": time.time(), **events.to_wire(event)}
        node_state.apply(self.state, wire)
        self.trace.write(wire)
        self._publish(protocol.TOPIC_EVENT, wire)
        for observe in self.observers:
            observe(wire)

    def snapshot(self) -> dict[str, Any]:
        return {"seq": self.state.seq, "state": node_state.to_snapshot(self.state)}

    def snapshot_encoded(self) -> Encoded:
        """The snapshot, built and encoded once per seq: the state changes only
        by an event, so every request between two events gets the same bytes
        (a flood of snapshot requests costs a copy each, not a state walk)."""
        if self._encoded is None or self._encoded[0] != self.state.seq:
            self._encoded = (self.state.seq, Encoded(protocol.encode(self.snapshot())))
        return self._encoded[1]

    def publish_snapshot(self) -> None:
        self._publish(protocol.TOPIC_SNAPSHOT, self.snapshot_encoded())
