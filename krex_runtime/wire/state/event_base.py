"""The machinery of the event registry (wire/state/events.py holds the events):
the `Event` base, the `@event` decorator that registers a class in `EVENTS`,
the field notes the docs' table prints, the wire form of an event and that
table. Kept apart so that events.py is the list of events and nothing else.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, TypeVar, dataclass_transform

EVENTS: dict[str, type["Event"]] = {}


class Event:
    """Base of every event; `@event(name)` makes a subclass one."""

    type: ClassVar[str]


def note(
    text: str = "", default: Any = MISSING, *, factory: Any = MISSING, checked: bool = True, omit_none: bool = False
) -> Any:
    """A field with a note for the docs' table. `checked=False`: the reducer
    does not read it, so a trace's value passes unchecked. `omit_none`: left
    off the wire when None (the key is absent, as emitters always had it)."""
    metadata = {"note": text, "checked": checked, "omit_none": omit_none}
    return field(default=default, default_factory=factory, metadata=metadata)


def unread(text: str = "", default: Any = MISSING, *, factory: Any = MISSING, omit_none: bool = False) -> Any:
    """A field the reducer does not read: carried to the trace and the console as it is."""
    return note(text, default, factory=factory, checked=False, omit_none=omit_none)


E = TypeVar("E", bound=type[Event])


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field, note, unread))
def event(name: str) -> Callable[[E], E]:
    """Make the class a frozen, keyword-only dataclass whose wire `type` is
    `name`, and register it in EVENTS."""

    def register(cls: E) -> E:
        if name in EVENTS:
            raise TypeError(f"event type {name!r} is defined twice")
        cls.type = name
        EVENTS[name] = dataclass(frozen=True, kw_only=True)(cls)
        return cls

    return register


# --- to the wire --------------------------------------------------------------------


def to_wire(event: Event) -> dict[str, Any]:
    """The event as the trace and the PUB socket carry it: `type`, then its fields."""
    wire: dict[str, Any] = {"type": event.type}
    for f in dataclasses.fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)
        if value is None and f.metadata.get("omit_none"):
            continue
        wire[f.name] = value
    return wire


# --- the docs' table ----------------------------------------------------------------


def markdown_table() -> str:
    """docs/trace-format.md's table of events (a test keeps the doc in step)."""
    rows = ["| type | fields | meaning |", "|---|---|---|"]
    for name, cls in EVENTS.items():
        fields = ", ".join(
            f"`{f.name}`" + (f" ({f.metadata['note']})" if f.metadata.get("note") else "")
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        )
        rows.append(f"| `{name}` | {fields} | {' '.join((cls.__doc__ or '').split())} |")
    return "\n".join(rows) + "\n"
