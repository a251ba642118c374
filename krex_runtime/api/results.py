"""What the API hands back: frozen dataclasses built from the runtime's
records (docs/protocol.md), so callers read attributes, not dict keys.

Fields an older runtime does not send (a region's verdict, the count of
unprotected timings, what auto-regions wrapped) are None / 0 / empty from it;
nothing here invents them. A field sent with the wrong type (`exit_code:
"zero"`), a record that is not an object or lacks its id is no record: it
raises ProtocolError (`bad_message`) naming the field, never KeyError or
AttributeError, and nothing of it reaches a dataclass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.api.options import Command  # noqa: F401 (one map item: defined with the options it carries)
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError

# --- reading a record by the types of its fields ------------------------------------

Check = Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and math.isfinite(v))


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_object(v: Any) -> bool:
    return isinstance(v, Mapping)


def _list_of(item: Check) -> Check:
    return lambda v: isinstance(v, list) and all(item(x) for x in v)


def _map_of(item: Check) -> Check:
    return lambda v: isinstance(v, Mapping) and all(isinstance(k, str) and item(x) for k, x in v.items())


_KINDS: dict[Check, str] = {_is_int: "an integer", _is_number: "a number", _is_str: "a string", _is_bool: "a boolean",
                            _is_object: "an object"}


class Fields:
    """One record from the runtime, read field by field: a field that is
    missing (or null) gives its default, one of another type a ProtocolError
    naming it."""

    def __init__(self, record: Any, what: str) -> None:
        if not isinstance(record, Mapping):
            raise malformed(f"{what} is {_shown(record)}, not an object")
        self.record, self.what = record, what

    def get(self, key: str, check: Check, default: Any = None, kind: str = "") -> Any:
        value = self.record.get(key)
        if value is None:
            return default
        if not check(value):
            raise malformed(f"{self.what}.{key} must be {kind or _KINDS.get(check, 'of another type')}, "
                            f"not {_shown(value)}")
        return value

    def need(self, key: str, check: Check, kind: str = "") -> Any:
        value = self.get(key, check, kind=kind)
        if value is None:
            raise malformed(f"{self.what} has no {key}")
        return value


def malformed(reason: str) -> ProtocolError:
    """The client's error for a reply or record that is not one of the protocol."""
    return ProtocolError(ErrorCode.BAD_MESSAGE, f"the runtime sent a malformed message: {reason}")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


_STRS, _INTS = _list_of(_is_str), _list_of(_is_int)


@dataclass(frozen=True)
class Region:
    """One region a command held, as the runtime recorded its grant and release."""

    region: int  # request number, node-wide
    gpu: int
    kind: str  # "region", or "lease" for a command run with the GPU leased
    granted_at: float | None
    wait_s: float | None  # queued before the grant
    enter_s: float | None  # the whole entry: gate, drain, freeze, pin
    hold_s: float | None  # None while held (or when the release was not seen)
    reason: str | None  # why it ended: "released", "tenant disconnected", ...
    flags: tuple[str, ...]  # e.g. a throttled or off-tolerance clock at the grant
    sm_clock_mhz: float | None
    throttle: tuple[str, ...] | None
    verdict: str | None  # verified / violated / unknown (docs/regions.md); None: this runtime gives no verdicts
    verdict_reasons: tuple[str, ...] = ()  # one line per witness: gate, processes, clock
    exit_flags: tuple[str, ...] = ()  # as `flags`, of the clock at the release
    settle_s: float | None = None  # the entry's wait for the SM clock (regions.settle_max_s)
    on_clock: bool | None = None  # the SM clock at the grant was near the GPU's top clock (or above); None: unknown
    # Measurement integrity of its timed windows (docs/integrity.md): windows, clean, summary,
    # flags {name: {count, reason}}, timing (the driver's elapsed times of the judged windows:
    # windows, median_ms, min_ms, p10_ms, p90_ms, max_ms, mean_ms, dropped, host_paced: windows the
    # host paced, None from a library before it; None when none);
    # None: the holder reported none (or an older runtime)
    integrity: Mapping[str, Any] | None = None
    # A region over a set of GPUs: the set (it has a Region per GPU, each with this one
    # `region` id; the set's verdict is the worst of theirs); (): one GPU.
    gpus: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Region:
        f = Fields(r, "region")
        throttle = f.get("throttle", _STRS, kind="a list of strings")
        return cls(
            region=f.get("region", _is_int, 0),
            gpu=f.get("gpu", _is_int, 0),
            kind=f.get("kind", _is_str, "region"),
            granted_at=f.get("granted_at", _is_number),
            wait_s=f.get("wait_s", _is_number),
            enter_s=f.get("enter_s", _is_number),
            hold_s=f.get("hold_s", _is_number),
            reason=f.get("reason", _is_str),
            flags=tuple(f.get("flags", _STRS, (), "a list of strings")),
            sm_clock_mhz=f.get("sm_clock_mhz", _is_number),
            throttle=tuple(throttle) if throttle is not None else None,
            verdict=f.get("verdict", _is_str),
            verdict_reasons=tuple(f.get("verdict_reasons", _STRS, (), "a list of strings")),
            exit_flags=tuple(f.get("exit_flags", _STRS, (), "a list of strings")),
            settle_s=f.get("settle_s", _is_number),
            on_clock=f.get("on_clock", _is_bool),
            integrity=_integrity(f.get("integrity", _is_object)),
            gpus=tuple(f.get("gpus", _INTS, (), "a list of integers")),
        )


def _integrity(v: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if v is None:
        return None
    f = Fields(v, "region.integrity")
    flags = f.get("flags", _map_of(_is_object), {}, "an object of objects")
    return {"windows": f.get("windows", _is_int, 0), "clean": f.get("clean", _is_bool, not flags),
            "summary": f.get("summary", _is_str, ""),
            "flags": {name: {"count": Fields(x, f"region.integrity.flags.{name}").get("count", _is_int, 0),
                             "reason": Fields(x, f"region.integrity.flags.{name}").get("reason", _is_str, "")}
                      for name, x in flags.items()},
            "timing": _timing(f.get("timing", _is_object))}


_TIMES_MS = ("median_ms", "min_ms", "p10_ms", "p90_ms", "max_ms", "mean_ms")


def _timing(v: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The driver's elapsed times of a region's judged windows (docs/integrity.md);
    None from a runtime or client that sends none."""
    if v is None:
        return None
    f = Fields(v, "region.integrity.timing")
    return {"windows": f.need("windows", _is_int), **{k: float(f.need(k, _is_number)) for k in _TIMES_MS},
            "dropped": f.get("dropped", _is_int, 0), "host_paced": f.get("host_paced", _is_int)}


@dataclass(frozen=True)
class Result:
    """How a command ended, with its output and its regions."""

    id: str
    state: str  # finished | timeout | cancelled | failed
    exit_code: int | None
    signal: int | None
    reason: str
    stdout: str
    stderr: str
    gpu: int | None
    label: str
    mode: str
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    queue_s: float | None
    run_s: float | None
    total_s: float | None
    regions: tuple[Region, ...]
    region_count: int  # all its regions; `regions` holds the first ones the runtime keeps
    unprotected_timings: int  # event timings outside any region; 0 from a runtime that does not count them
    untracked_timings: int = 0  # event timings the library could not track (known neither way); 0 from older runtimes
    worker: str | None = None
    auto_regions: tuple[str, ...] = ()  # the timing entry points auto-regions ran in regions
    share: str = ""  # its fair-share key
    output_lost: Mapping[str, int] = field(default_factory=dict)  # stream -> bytes its output files did not get
    output_error: str = ""  # why (the first failed write), "" when nothing was lost
    # The runtime dropped messages to this client while it followed the command
    # (it did not read in time): stdout/stderr here may miss some output, the
    # files the record names (stdout_path, stderr_path) have all of it.
    output_incomplete: bool = False
    gpus: tuple[int, ...] = ()  # placed on a set of GPUs: the set (`gpu` its first); (): one GPU
    argv: tuple[str, ...] = ()  # its command line where the record carries it (`show`'s does); () otherwise
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)  # as the runtime sent it

    @property
    def exit_status(self) -> int:
        """What `krex run` exits with: the exit code, 128+N after signal N,
        124 after a timeout, 125 when KREX failed to run it."""
        return protocol.exit_status_of(dict(self.record) or {"state": self.state, "signal": self.signal, "exit_code": self.exit_code})

    @property
    def ok(self) -> bool:
        return self.state == "finished" and self.exit_code == 0 and not self.signal

    @classmethod
    def from_record(cls, r: Mapping[str, Any], stdout: str = "", stderr: str = "") -> Result:
        """ProtocolError for a record that is not a result record (docs/protocol.md)."""
        f = Fields(r, "result")
        regions = tuple(Region.from_record(x) for x in f.get("regions", _list_of(_is_object), (), "a list of objects"))
        return cls(
            id=f.need("id", _is_str),
            state=f.need("state", _is_str),
            exit_code=f.get("exit_code", _is_int),
            signal=f.get("signal", _is_int),
            reason=f.get("reason", _is_str, ""),
            stdout=stdout,
            stderr=stderr,
            gpu=f.get("gpu", _is_int),
            label=f.get("label", _is_str, ""),
            mode=f.get("mode", _is_str, "process") or "process",
            submitted_at=float(f.get("submitted_at", _is_number, 0.0)),
            started_at=f.get("started_at", _is_number),
            finished_at=f.get("finished_at", _is_number),
            queue_s=f.get("queue_s", _is_number),
            run_s=f.get("run_s", _is_number),
            total_s=f.get("total_s", _is_number),
            regions=regions,
            region_count=f.get("region_count", _is_int, len(regions)),
            unprotected_timings=f.get("unprotected_timings", _is_int, 0),
            untracked_timings=f.get("untracked_timings", _is_int, 0),
            worker=f.get("worker", _is_str),
            auto_regions=tuple(f.get("auto_regions", _STRS, (), "a list of strings")),
            share=f.get("share", _is_str, ""),
            output_lost=dict(f.get("output_lost", _map_of(_is_int), {}, "an object of integers")),
            output_error=f.get("output_error", _is_str, ""),
            gpus=tuple(f.get("gpus", _INTS, (), "a list of integers")),
            argv=tuple(f.get("argv", _STRS, (), "a list of strings")),
            record=dict(r),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (`krex run --json` prints this): every field, `exit_status` added."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "record"}
        data["regions"] = [dataclasses.asdict(r) for r in self.regions]
        data["exit_status"] = self.exit_status
        return data


@dataclass(frozen=True)
class GpuStatus:
    index: int
    name: str
    simulated: bool
    slots: int
    running: tuple[str, ...]  # command ids
    queued: int
    paused: bool
    leased: bool
    region_holder: int | None  # tenant id; 0: an operator's lease
    region_kind: str
    region_since: float | None
    region_queue: int
    frozen: tuple[int, ...]
    regions_granted: int
    last_enter_s: float | None  # the last region's entry; None before any
    pool: Mapping[str, Any]
    verdicts: Mapping[str, int] = field(default_factory=dict)  # released regions per certificate verdict
    foreign_processes: tuple[int, ...] = ()  # pids using the GPU that this runtime did not start
    region_gpus: tuple[int, ...] = ()  # the holder's region is over this set of GPUs (one region id on each); (): this one
    vendor: str = "nvidia"  # "nvidia" or "amd" (a runtime from before AMD support sends none: NVIDIA's)


@dataclass(frozen=True)
class CommandStatus:
    id: str
    state: str  # queued | running
    argv: tuple[str, ...]
    label: str
    gpu: int | None
    mode: str
    submitted_at: float
    started_at: float | None


@dataclass(frozen=True)
class NodeStatus:
    node: str
    policy: str
    pid: int
    uptime_s: float
    paused: bool
    stopping: bool
    queued: int
    totals: Mapping[str, int]
    gpus: tuple[GpuStatus, ...]
    commands: tuple[CommandStatus, ...]  # queued and running
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> NodeStatus:
        """ProtocolError for a record that is not a `status` reply's body."""
        f = Fields(r, "status")
        objects = _list_of(_is_object)
        return cls(
            node=f.need("node", _is_str), policy=f.need("policy", _is_str), pid=f.need("pid", _is_int),
            uptime_s=f.need("uptime_s", _is_number), paused=f.need("paused", _is_bool),
            stopping=f.need("stopping", _is_bool), queued=f.need("queued", _is_int),
            totals=dict(f.get("totals", _map_of(_is_int), {}, "an object of integers")),
            gpus=tuple(_gpu_status(g) for g in f.get("gpus", objects, (), "a list of objects")),
            commands=tuple(_command_status(c) for c in f.get("commands", objects, (), "a list of objects")),
            record=dict(r),
        )


def _gpu_status(g: Mapping[str, Any]) -> GpuStatus:
    f = Fields(g, "status.gpus[]")
    last_region = Fields(f.get("last_region", _is_object, {}), "status.gpus[].last_region")
    return GpuStatus(
        index=f.need("index", _is_int), name=f.need("name", _is_str), simulated=f.get("simulated", _is_bool, False),
        slots=f.need("slots", _is_int), running=tuple(f.get("running", _STRS, (), "a list of strings")),
        queued=f.get("queued", _is_int, 0), paused=f.get("paused", _is_bool, False),
        leased=f.get("leased", _is_bool, False), region_holder=f.get("region_holder", _is_int),
        region_kind=f.get("region_kind", _is_str, ""), region_since=f.get("region_since", _is_number),
        region_queue=f.get("region_queue", _is_int, 0), frozen=tuple(f.get("frozen", _INTS, (), "a list of integers")),
        regions_granted=f.get("regions_granted", _is_int, 0), last_enter_s=last_region.get("enter_s", _is_number),
        pool=dict(f.get("pool", _is_object, {})),
        verdicts=dict(f.get("verdicts", _map_of(_is_int), {}, "an object of integers")),
        foreign_processes=tuple(f.get("foreign_processes", _INTS, (), "a list of integers")),
        region_gpus=tuple(f.get("region_gpus", _INTS, (), "a list of integers")),
        vendor=f.get("vendor", _is_str, "nvidia"),
    )


def _command_status(c: Mapping[str, Any]) -> CommandStatus:
    f = Fields(c, "status.commands[]")
    return CommandStatus(
        id=f.need("id", _is_str), state=f.need("state", _is_str),
        argv=tuple(f.get("argv", _STRS, (), "a list of strings")), label=f.get("label", _is_str, ""),
        gpu=f.get("gpu", _is_int), mode=f.get("mode", _is_str, "process") or "process",
        submitted_at=f.get("submitted_at", _is_number, 0.0), started_at=f.get("started_at", _is_number),
    )


@dataclass(frozen=True)
class Event:
    """One event of the telemetry stream, as in the trace (docs/trace-format.md)."""

    seq: int
    t: float
    type: str
    fields: Mapping[str, Any]  # the event's own fields (wire/state/events.py names them)

    @classmethod
    def from_wire(cls, e: Mapping[str, Any]) -> Event:
        f = Fields(e, "event")
        return cls(
            seq=f.get("seq", _is_int, 0), t=float(f.get("t", _is_number, 0.0)), type=f.get("type", _is_str, ""),
            fields={k: v for k, v in e.items() if k not in ("seq", "t", "type")},
        )
