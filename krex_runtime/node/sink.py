"""Where components put their events.

Every state change of the node is an event (krex_runtime/wire/state/events.py).
Components are given a sink and emit into it; the service's sink numbers each
event, folds it into the node state with the one reducer, appends it to the
trace and publishes it (krex_runtime/service/event_log.py).
"""

from __future__ import annotations

from typing import Protocol

from krex_runtime.wire.state.events import Event


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...
