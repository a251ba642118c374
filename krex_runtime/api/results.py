"""What the API hands back: frozen dataclasses built from the runtime's
records (docs/protocol.md), so callers read attributes, not dict keys.

Fields an older runtime does not send (a region's verdict, the count of
unprotected timings, what auto-regions wrapped) are None / 0 / empty from it;
nothing here invents them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from krex_runtime.wire import protocol


@dataclass(frozen=True)
class Command:
    """One command for `Client.map` (or `submit(**vars(command))`): argv and
    the same options as `run`."""

    argv: Sequence[str]
    gpu: int | None = None
    mode: str | None = None
    timeout: float | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    label: str | None = None
    auto_region: bool | None = None
    auto_region_entries: Sequence[str] | None = None
    share: str | None = None
    node_labels: Mapping[str, str] | None = None
    gpu_model: str | None = None
    retries: int | None = None


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

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Region:
        throttle = r.get("throttle")
        return cls(
            region=int(r.get("region", 0)),
            gpu=int(r.get("gpu", 0)),
            kind=str(r.get("kind", "region")),
            granted_at=r.get("granted_at"),
            wait_s=r.get("wait_s"),
            enter_s=r.get("enter_s"),
            hold_s=r.get("hold_s"),
            reason=r.get("reason"),
            flags=tuple(r.get("flags") or ()),
            sm_clock_mhz=r.get("sm_clock_mhz"),
            throttle=tuple(throttle) if throttle is not None else None,
            verdict=r.get("verdict"),
            verdict_reasons=tuple(r.get("verdict_reasons") or ()),
            exit_flags=tuple(r.get("exit_flags") or ()),
            settle_s=r.get("settle_s"),
            on_clock=r.get("on_clock"),
        )


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
    worker: str | None = None
    auto_regions: tuple[str, ...] = ()  # the timing entry points auto-regions ran in regions
    share: str = ""  # its fair-share key
    output_lost: Mapping[str, int] = field(default_factory=dict)  # stream -> bytes its output files did not get
    output_error: str = ""  # why (the first failed write), "" when nothing was lost
    # The runtime dropped messages to this client while it followed the command
    # (it did not read in time): stdout/stderr here may miss some output, the
    # files the record names (stdout_path, stderr_path) have all of it.
    output_incomplete: bool = False
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)  # as the runtime sent it

    @property
    def exit_status(self) -> int:
        """What `krex run` exits with: the exit code, 128+N after signal N,
        124 after a timeout, 125 when KREX failed to run it."""
        return protocol.exit_status_of(self.record or {"state": self.state, "signal": self.signal, "exit_code": self.exit_code})

    @property
    def ok(self) -> bool:
        return self.state == "finished" and self.exit_code == 0 and not self.signal

    @classmethod
    def from_record(cls, r: Mapping[str, Any], stdout: str = "", stderr: str = "") -> Result:
        regions = tuple(Region.from_record(x) for x in r.get("regions") or ())
        return cls(
            id=str(r["id"]),
            state=str(r["state"]),
            exit_code=r.get("exit_code"),
            signal=r.get("signal"),
            reason=str(r.get("reason") or ""),
            stdout=stdout,
            stderr=stderr,
            gpu=r.get("gpu"),
            label=str(r.get("label") or ""),
            mode=str(r.get("mode") or "process"),
            submitted_at=float(r.get("submitted_at") or 0.0),
            started_at=r.get("started_at"),
            finished_at=r.get("finished_at"),
            queue_s=r.get("queue_s"),
            run_s=r.get("run_s"),
            total_s=r.get("total_s"),
            regions=regions,
            region_count=int(r.get("region_count", len(regions))),
            unprotected_timings=int(r.get("unprotected_timings") or 0),
            worker=r.get("worker"),
            auto_regions=tuple(r.get("auto_regions") or ()),
            share=str(r.get("share") or ""),
            output_lost={k: int(v) for k, v in (r.get("output_lost") or {}).items()},
            output_error=str(r.get("output_error") or ""),
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
        return cls(
            node=r["node"], policy=r["policy"], pid=r["pid"], uptime_s=r["uptime_s"], paused=r["paused"],
            stopping=r["stopping"], queued=r["queued"], totals=dict(r.get("totals") or {}),
            gpus=tuple(_gpu_status(g) for g in r.get("gpus") or ()),
            commands=tuple(_command_status(c) for c in r.get("commands") or ()),
            record=dict(r),
        )


def _gpu_status(g: Mapping[str, Any]) -> GpuStatus:
    return GpuStatus(
        index=g["index"], name=g["name"], simulated=bool(g.get("simulated")), slots=g["slots"],
        running=tuple(g.get("running") or ()), queued=g.get("queued", 0), paused=bool(g.get("paused")),
        leased=bool(g.get("leased")), region_holder=g.get("region_holder"), region_kind=g.get("region_kind") or "",
        region_since=g.get("region_since"), region_queue=g.get("region_queue", 0),
        frozen=tuple(g.get("frozen") or ()), regions_granted=g.get("regions_granted", 0),
        last_enter_s=(g.get("last_region") or {}).get("enter_s"), pool=dict(g.get("pool") or {}),
        verdicts=dict(g.get("verdicts") or {}), foreign_processes=tuple(g.get("foreign_processes") or ()),
    )


def _command_status(c: Mapping[str, Any]) -> CommandStatus:
    return CommandStatus(
        id=c["id"], state=c["state"], argv=tuple(c.get("argv") or ()), label=c.get("label") or "",
        gpu=c.get("gpu"), mode=c.get("mode") or "process", submitted_at=c.get("submitted_at") or 0.0,
        started_at=c.get("started_at"),
    )


@dataclass(frozen=True)
class Event:
    """One event of the telemetry stream, as in the trace (docs/trace-format.md)."""

    seq: int
    t: float
    type: str
    fields: Mapping[str, Any]  # the event's own fields (wire/events.py names them)

    @classmethod
    def from_wire(cls, e: Mapping[str, Any]) -> Event:
        return cls(
            seq=int(e.get("seq", 0)), t=float(e.get("t", 0.0)), type=str(e.get("type", "")),
            fields={k: v for k, v in e.items() if k not in ("seq", "t", "type")},
        )
