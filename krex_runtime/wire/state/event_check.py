"""Checking an event that comes from outside (a trace file) against its class
in wire/state/events.py before the reducer folds it.

Only the fields the reducer reads are checked (a field made with
`events.unread` passes as it is), as are unknown extra fields: a trace must
be foldable, not identical to what this runtime would write.
"""

import dataclasses
import math
import types
import typing
from typing import Any

from krex_runtime.wire.state.events import EVENTS, Event, RuntimeStarted, TraceGap


class EventError(ValueError):
    """An event the reducer cannot fold: a field missing or of the wrong type, or
    a GPU or command the state does not know (the message says which)."""


class UnknownEvent(EventError):
    pass


_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "list", dict: "object",
               type(None): "null"}
# The fields of each GPU in runtime_started's `gpus` that the reducer reads.
_GPU_RECORD: dict[str, tuple[type, ...]] = {
    "index": (int,), "uuid": (str,), "name": (str,), "memory_total": (int,), "simulated": (bool,), "slots": (int,),
    "cpus?": (list,), "pool_size?": (int,), "vendor?": (str,),
}
_EVERY_EVENT: dict[str, tuple[type, ...]] = {"seq": (int,), "t": (int, float), "type": (str,)}
_GAP_RECORD: dict[str, tuple[type, ...]] = {"t": (int, float), "type": (str,)}  # written by the trace: no seq


def _wire_types(annotation: Any) -> tuple[type, ...]:
    """The JSON types a field of this annotation may hold (a float may be written as an integer)."""
    alternatives = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    found: list[type] = []
    for alternative in alternatives:
        origin = typing.get_origin(alternative) or alternative
        found += [int, float] if origin is float else [origin]
    return tuple(found)


def _item_type(annotation: Any) -> type | None:
    """str or int for a list[str] or list[int] field (its items are checked too)."""
    alternatives = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    for alternative in alternatives:
        if typing.get_origin(alternative) is list and typing.get_args(alternative)[0] in (str, int):
            item: type = typing.get_args(alternative)[0]
            return item
    return None


def _checked(cls: type[Event]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("checked", True)]  # type: ignore[arg-type]


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


# Per event type, the fields the reducer reads and the types they may hold; a
# name ending in "?" may be absent. Other fields pass as they are.
SHAPES: dict[str, dict[str, tuple[type, ...]]] = {
    name: {f.name + ("" if _required(f) else "?"): _wire_types(f.type) for f in _checked(cls)}
    for name, cls in EVENTS.items()
}
_ITEMS: dict[str, dict[str, type]] = {
    name: {f.name: item for f in _checked(cls) if (item := _item_type(f.type)) is not None}
    for name, cls in EVENTS.items()
}


def check_event(event: Any) -> None:
    """EventError unless `event` has the fields its type needs, of the right types.
    For data from outside (a trace file); the runtime's own events are trusted."""
    if not isinstance(event, dict):
        raise EventError("an event must be a JSON object")
    check_fields("event", event, _GAP_RECORD if event.get("type") == TraceGap.type else _EVERY_EVENT)
    fields = SHAPES.get(event["type"])
    if fields is None:
        raise UnknownEvent(f"unknown event type {event['type']!r}")
    check_fields(event["type"], event, fields)
    if event["type"] == RuntimeStarted.type:
        for i, gpu in enumerate(event["gpus"]):
            if not isinstance(gpu, dict):
                raise EventError(f"runtime_started: gpus[{i}] must be an object")
            check_fields(f"runtime_started: gpus[{i}]", gpu, _GPU_RECORD)
    for key, want in _ITEMS[event["type"]].items():
        if not all(isinstance(v, want) and not isinstance(v, bool) for v in event.get(key) or []):
            raise EventError(f"{event['type']}: '{key}' must hold only {_TYPE_NAMES[want]}s")


def check_fields(where: str, record: dict[str, Any], fields: dict[str, tuple[type, ...]]) -> None:
    for name, wanted in fields.items():
        key = name.rstrip("?")
        if key not in record:
            if name.endswith("?"):
                continue
            raise EventError(f"{where}: field '{key}' is missing")
        value = record[key]
        # bool is an int to Python, never to a trace; a number must be finite.
        wrong = (isinstance(value, bool) and bool not in wanted) or not isinstance(value, wanted)
        if wrong or (isinstance(value, float) and not math.isfinite(value)):
            names = " or ".join(_TYPE_NAMES[t] for t in wanted)
            raise EventError(f"{where}: field '{key}' must be {names}, not {describe(value)}")


def describe(value: Any) -> str:
    return f"{value!r}"[:40] if not isinstance(value, (list, dict)) else _TYPE_NAMES[type(value)]
