"""What the Nodes view shows of each node of a cluster, from either source:

- live, a row of the gateway's `status` reply (docs/console.md, "Clusters":
  name, alive, since, reason, labels, gpus, and that node's own status body)
  with the liveness its `cluster` telemetry topic adds between replies;
- in replay, the node's state as the reducer folded its trace so far.

Both become a `NodeSummary`, so the view has one shape to draw and a test
can compare a live row with a replayed one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from krex_console import format as fmt
from krex_console.model import CANARY_LABEL, OPERATOR_TENANT, holder_short, inflation_of, tenants_of
from krex_runtime.wire.state.model import NodeState


@dataclass(frozen=True)
class GpuLine:
    """One GPU of a node, as the Nodes view and its panel show it."""

    index: int
    holder: str  # "-", "operator", "t12", "t12 lease"
    region_queue: int
    queued: int  # waiting for a slot on this GPU
    running: int  # commands in its slots (the canary takes none)
    slots: int
    canary: bool
    paused: bool
    leased: bool
    inflation_p50: float | None
    inflation_p95: float | None
    name: str = ""


@dataclass(frozen=True)
class NodeSummary:
    name: str
    alive: bool
    reason: str = ""  # why not alive: "raylet gone", "runtime gone: ...", "stopped"
    since: float | None = None  # alive or dead since (the gateway's clock, or the trace's)
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_count: int = 0
    gpus: tuple[GpuLine, ...] | None = None  # None: no status from the node (dead, or not yet)
    policy: str = ""
    queued: int = 0  # the node's admission queue
    paused: bool = False
    stopping: bool = False

    @property
    def running(self) -> int:
        return sum(g.running for g in self.gpus or ())

    @property
    def slots(self) -> int:
        return sum(g.slots for g in self.gpus or ())


def _holder_of_status(g: Mapping[str, Any]) -> str:
    holder = g.get("region_holder")
    if holder is None:
        return "-"
    lease = g.get("region_kind") == "lease"
    if holder == OPERATOR_TENANT and lease:
        return "operator"
    return f"t{holder}{' lease' if lease else ''}"


def from_status_row(row: Mapping[str, Any]) -> NodeSummary:
    """A node from a row of the gateway's `status` reply (or of its `cluster`
    message, which has no `status`). Fields a node does not send read as
    missing, never as an error: rows come from other programs."""
    status = row.get("status") if isinstance(row.get("status"), dict) else None
    gpus: tuple[GpuLine, ...] | None = None
    if status is not None:
        commands = {c.get("id"): c for c in status.get("commands") or () if isinstance(c, dict)}
        lines: list[GpuLine] = []
        for g in status.get("gpus") or ():
            if not isinstance(g, dict):
                continue
            running = [cid for cid in g.get("running") or ()]
            canaries = sum(1 for cid in running if _is_canary_record(commands.get(cid)))
            canary: dict[str, Any] = g["canary"] if isinstance(g.get("canary"), dict) else {}
            if fmt.number(canary.get("inside_p50")) is None and isinstance(g.get("estimate"), dict):
                canary = g["estimate"]  # no canary: the regions' own estimate (model.inflation_of)
            lines.append(GpuLine(
                index=int(g.get("index", len(lines))), holder=_holder_of_status(g),
                region_queue=_count(g.get("region_queue")), queued=_count(g.get("queued")),
                running=len(running) - canaries, slots=_count(g.get("slots")), canary=canaries > 0,
                paused=bool(g.get("paused")), leased=bool(g.get("leased")),
                inflation_p50=fmt.number(canary.get("inside_p50")), inflation_p95=fmt.number(canary.get("inside_p95")),
                name=str(g.get("name") or ""),
            ))
        gpus = tuple(lines)
    labels: Mapping[str, Any] = row["labels"] if isinstance(row.get("labels"), dict) else {}
    return NodeSummary(
        name=str(row.get("name", "?")), alive=bool(row.get("alive")), reason=str(row.get("reason") or ""),
        since=fmt.number(row.get("since")), labels={str(k): str(v) for k, v in labels.items()},
        gpu_count=_count(row.get("gpus")) or len(gpus or ()), gpus=gpus,
        policy=str((status or {}).get("policy") or ""), queued=_count((status or {}).get("queued")),
        paused=bool((status or {}).get("paused")), stopping=bool((status or {}).get("stopping")),
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else len(value) if isinstance(value, list) else 0


def _is_canary_record(record: Mapping[str, Any] | None) -> bool:
    """model.is_canary, for a command record of a status reply."""
    return record is not None and record.get("label") == CANARY_LABEL and record.get("timeout_s") is None


def from_state(name: str, state: NodeState, alive: bool, reason: str = "", since: float | None = None,
               labels: Mapping[str, str] | None = None, gpu_count: int = 0) -> NodeSummary:
    """A node from its state as the reducer built it (replay); `gpu_count`
    for a node whose state has none yet (its trace header's)."""
    lines = []
    for gpu in state.gpus.values():
        tenants, canary = tenants_of(state, gpu)
        lines.append(GpuLine(
            index=gpu.index, holder=holder_short(gpu), region_queue=len(gpu.region_queue), queued=gpu.queued,
            running=tenants, slots=gpu.slots, canary=canary, paused=gpu.paused,
            leased=gpu.region_kind == "lease" and gpu.region_holder is not None,
            inflation_p50=fmt.number(fmt.get(inflation_of(gpu), "inside_p50")),
            inflation_p95=fmt.number(fmt.get(inflation_of(gpu), "inside_p95")), name=gpu.name,
        ))
    return NodeSummary(
        name=name, alive=alive, reason=reason, since=since, labels=dict(labels or {}), gpu_count=len(lines) or gpu_count,
        gpus=tuple(lines) if alive else None, policy=state.policy, queued=len(state.queue),
        paused=state.paused, stopping=state.stopping,
    )


def holders_text(node: NodeSummary) -> str:
    """The GPUs whose region is held, and by whom: `0:t12 3:operator`, `-` when none."""
    if node.gpus is None:
        return fmt.NA
    held = [f"{g.index}:{g.holder}" for g in node.gpus if g.holder != "-"]
    return " ".join(held) if held else "-"


def worst_inflation(node: NodeSummary) -> float | None:
    """The highest inside-region p95 of the node's GPUs (None: no canary figures)."""
    values = [g.inflation_p95 for g in node.gpus or () if g.inflation_p95 is not None]
    return max(values) if values else None


def admission_text(node: NodeSummary) -> str:
    if node.gpus is None:
        return fmt.NA
    if node.paused:
        return "node paused"
    paused = sum(1 for g in node.gpus if g.paused)
    return f"{paused} paused" if paused else "open"


def state_text(node: NodeSummary) -> str:
    """`up`, `stopping` or `down` (the reason is beside it)."""
    if node.alive:
        return "stopping" if node.stopping else "up"
    return "down"


def labels_text(node: NodeSummary) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(node.labels.items())) or "-"


def gpu_line_text(g: GpuLine) -> str:
    """One GPU for the panel under the Nodes table."""
    infl = "n/a" if g.inflation_p50 is None and g.inflation_p95 is None else (
        f"{fmt.inflation_short(g.inflation_p50)}/{fmt.inflation_short(g.inflation_p95)}")
    flags = " paused" if g.paused else ""
    return (f"GPU {g.index}  holder {g.holder}  RQ {g.region_queue}  AQ {g.queued}  "
            f"run {g.running}/{g.slots}{' +c' if g.canary else ''}  infl {infl}{flags}  {g.name}").rstrip()
