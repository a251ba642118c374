"""Every event the runtime emits, one frozen dataclass per type.

An emitter builds the dataclass (`emit(events.CommandQueued(id=..., ...))`);
the runtime turns it into its wire dict with `to_wire`, adds `seq` and `t`,
folds it (wire/reducer.py), appends it to the trace and publishes it. Readers
of a trace or of the PUB socket receive those dicts; `check_event` checks one
(wire/event_check.py) against its class before the reducer folds it.

`EVENTS` maps each wire type name to its class; wire/event_check.py derives
from them what a trace's events must hold. docs/trace-format.md's table
of events is printed from it (`python -m krex_runtime.wire.events --markdown`),
and a test keeps the two the same. Field order is the order of the keys on the
wire; a new event type or a changed field bumps the trace format version.
"""

import dataclasses
import sys
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar

# How many finished commands a state remembers unless runtime_started says.
DEFAULT_KEEP_FINISHED = 1000

EVENTS: dict[str, type["Event"]] = {}


class Event:
    """Base of every event; a subclass is registered under its wire `type`."""

    type: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type" in vars(cls):  # a base of several events (PoolWorkerEvent) names none
            if cls.type in EVENTS:
                raise TypeError(f"event type {cls.type!r} is defined twice")
            EVENTS[cls.type] = cls


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


# --- the runtime starts -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RuntimeStarted(Event):
    """the service is up"""

    type: ClassVar[str] = "runtime_started"
    node: str
    policy: str
    pid: int
    keep_finished: int = DEFAULT_KEEP_FINISHED
    gpus: list[dict[str, Any]] = note("as in the header, with `pool_size`")
    cgroups: str | None = unread("slice path or null", None)
    regions: dict[str, Any] | None = unread("gate backend, freezer, reserved and tenant cores; null without regions",
                                            None)
    recovered: list[str] = unread("what a previous run left (closed gates, frozen tenants) and this start undid",
                                  factory=list)


# --- commands -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CommandQueued(Event):
    """admitted to the FIFO queue"""

    type: ClassVar[str] = "command_queued"
    id: str
    argv: list[str]
    gpu: int | None = note("requested index or null", None)
    timeout_s: float | None = None
    label: str = ""
    lease: bool = unread("", False)
    mode: str | None = note("`process` or `pooled`; absent for the runtime's own commands", None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class CommandStarted(Event):
    """its process started on `gpu` (pooled: a context process took it)"""

    type: ClassVar[str] = "command_started"
    id: str
    gpu: int
    pid: int | None
    tenant_id: int | None
    worker: str | None = note("pooled only: the context process's id; `pid` and `tenant_id` are then its", None,
                              omit_none=True)


@dataclass(frozen=True, kw_only=True)
class CommandFinished(Event):
    """it ended (also for commands cancelled while queued)"""

    type: ClassVar[str] = "command_finished"
    id: str
    state: str = note("`finished`, `timeout`, `cancelled`, `failed`")
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    gpu: int | None = unread("", None)


@dataclass(frozen=True, kw_only=True)
class AdmissionPaused(Event):
    """`krex pause`"""

    type: ClassVar[str] = "admission_paused"
    gpu: int | None = note("index, or null for the node", None)


@dataclass(frozen=True, kw_only=True)
class AdmissionResumed(Event):
    """`krex resume`"""

    type: ClassVar[str] = "admission_resumed"
    gpu: int | None = note("index, or null for the node", None)


# --- regions ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RegionRequested(Event):
    """a tenant asked for its GPU alone (leases queue ahead of regions)"""

    type: ClassVar[str] = "region_requested"
    gpu: int
    region: int = note("request number, node-wide")
    kind: str = note("`region` or `lease`")
    tenant_id: int | None = note("0: an operator's lease")
    command_id: str = unread()


@dataclass(frozen=True, kw_only=True)
class RegionGranted(Event):
    """the holder may measure"""

    type: ClassVar[str] = "region_granted"
    gpu: int
    region: int
    kind: str
    tenant_id: int | None
    command_id: str = ""
    frozen: list[int] = note("tenant ids", factory=list)
    drain: dict[str, str] = unread("pid -> ok / timed_out / error / no_ack / exited / stopped")
    wait_s: float = unread()
    close_s: float = unread()
    quiesce_s: float = unread()
    drain_s: float = unread()
    freeze_s: float = unread()
    pin_s: float = unread()
    enter_s: float = unread()
    sm_clock_mhz: float | None = unread("", None)
    throttle: list[str] | None = unread("", None)
    flags: list[str] | None = None
    others_calls: int = unread("the other tenants' intercepted calls so far")
    granted_mono_ns: int = unread("CLOCK_MONOTONIC")


@dataclass(frozen=True, kw_only=True)
class RegionReleased(Event):
    """everything given back"""

    type: ClassVar[str] = "region_released"
    gpu: int
    region: int
    kind: str = unread()
    tenant_id: int | None = unread()
    reason: str = note("`released`, `tenant disconnected`, `held past the ... limit ...`, `lease expired`, ...")
    hold_s: float = unread()
    unpin_s: float = unread()
    thaw_s: float = unread()
    open_s: float = unread()
    released_mono_ns: int = unread()
    others_calls: int = unread()


@dataclass(frozen=True, kw_only=True)
class RegionWithdrawn(Event):
    """a request left the queue ungranted (its tenant went away, or entry was
    refused: the reason names the tenants that did not drain)"""

    type: ClassVar[str] = "region_withdrawn"
    gpu: int
    region: int
    tenant_id: int | None = unread()
    reason: str = unread()


# --- telemetry and the canary -------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Telemetry(Event):
    """one sample of every GPU"""

    type: ClassVar[str] = "telemetry"
    gpus: dict[str, dict[str, Any]] = note(
        "per GPU index: `util_pct`, `mem_used`, `mem_total`, `sm_clock_mhz`, `mem_clock_mhz`, `temp_c`, `power_w`, "
        "`throttle`, `processes`, `simulated`, `time`, `parked`, `draining` (null: not available)"
    )


@dataclass(frozen=True, kw_only=True)
class CanaryBaseline(Event):
    """the canary's reference kernels on the idle, warmed GPU"""

    type: ClassVar[str] = "canary_baseline"
    window: int = 30
    gpu: int
    compute_ms: float
    memory_ms: float
    sm_clock_mhz: float | None = unread("", None)
    throttle: list[str] | None = unread("", None)


@dataclass(frozen=True, kw_only=True)
class CanarySample(Event):
    """one measurement; the reducer keeps the window and its inflation p50/p95
    and contention factor"""

    type: ClassVar[str] = "canary_sample"
    where: str = note("`inside` / `outside` a region", "inside")
    flagged: bool = unread("", False)
    gpu: int
    compute_ms: float | None = None
    memory_ms: float | None = None
    sm_clock_mhz: float | None = unread("", None)
    throttle: list[str] | None = unread("", None)


# --- the context pool ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PoolWorkerEvent(Event):
    """Base of the pool's events: which context process, on which GPU."""

    gpu: int
    worker: str = note("its id")


@dataclass(frozen=True, kw_only=True)
class PoolWorkerStarted(PoolWorkerEvent):
    """a context process was started (warming: imports, context)"""

    type: ClassVar[str] = "pool_worker_started"
    pid: int | None
    tenant_id: int | None


@dataclass(frozen=True, kw_only=True)
class PoolWorkerReady(PoolWorkerEvent):
    """it created its context and is idle"""

    type: ClassVar[str] = "pool_worker_ready"
    startup_s: float | None = unread("", None)
    context: str = unread("`sim`, `driver`, `torch`, `none`", "")


@dataclass(frozen=True, kw_only=True)
class PoolWorkerBusy(PoolWorkerEvent):
    """it took a pooled command"""

    type: ClassVar[str] = "pool_worker_busy"
    command: str | None


@dataclass(frozen=True, kw_only=True)
class PoolWorkerCleaning(PoolWorkerEvent):
    """the command ended; state is being restored, memory freed, health checked"""

    type: ClassVar[str] = "pool_worker_cleaning"
    command: str | None = unread("", None)


@dataclass(frozen=True, kw_only=True)
class PoolWorkerIdle(PoolWorkerEvent):
    """clean and healthy again: it may take the next command"""

    type: ClassVar[str] = "pool_worker_idle"
    served: int = 0


@dataclass(frozen=True, kw_only=True)
class PoolWorkerReplaced(PoolWorkerEvent):
    """it was ended and a replacement queued"""

    type: ClassVar[str] = "pool_worker_replaced"
    cause: str = note(
        "`exited` (crashed, `os._exit`, killed from outside), `timeout`, `cancelled`, `recycled`, `threads` (left a "
        "non-daemon thread), `leak` (device memory it could not free), `health`, `cleanup`, `clean_timeout`, "
        "`max_commands`, `start_failed`"
    )
    reason: str = unread("", "")


@dataclass(frozen=True, kw_only=True)
class PoolWorkerStopped(PoolWorkerEvent):
    """it was ended for good (runtime stopping)"""

    type: ClassVar[str] = "pool_worker_stopped"
    reason: str = unread("", "")


# --- the runtime stops -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RuntimeStopping(Event):
    """SIGTERM/SIGINT received; admission closed"""

    type: ClassVar[str] = "runtime_stopping"
    reason: str = unread()


@dataclass(frozen=True, kw_only=True)
class RuntimeStopped(Event):
    """every command ended; nothing left running"""

    type: ClassVar[str] = "runtime_stopped"


# --- the trace ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TraceGap(Event):
    """the trace could not record events `first_seq`..`last_seq` (see below);
    written by the trace writer, never published"""

    type: ClassVar[str] = "trace_gap"
    lost: int
    first_seq: int | None
    last_seq: int | None
    since: float | None = unread("`t` of the first lost event; no `seq` of its own", None)


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


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m krex_runtime.wire.events --markdown")
    sys.stdout.write(markdown_table())
