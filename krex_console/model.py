"""What the views show, derived from the reducer's state and nothing else.

`gpu_figures` is the one place a GPU's row is computed, so the overview, the
GPU detail and the tests that compare a live view with its replay all read
the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from krex_console import format as fmt
from krex_console.event_log import EventLog
from krex_runtime.wire.state.model import CommandInfo, GpuState, NodeState

OPERATOR_TENANT = 0  # the region holder id of an operator's lease (state.py)
TELEMETRY_SERIES = ("util_pct", "mem_used", "sm_clock_mhz", "temp_c")
# Series the GPU detail plots, beside the telemetry: the canary's inflation
# estimate (inside regions, p50) and the queue depth (region + admission).
DERIVED_SERIES = ("inflation", "queue")
HISTORY_LEN = 300  # seconds: the GPU detail plots the last five minutes
CANARY_LABEL = "canary"  # the runtime's own tenant per GPU (telemetry.canary)


class MetricHistory:
    """Recent telemetry per GPU UUID for the sparklines, one sample per
    second of node time (so replay at any speed draws the same lines)."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], list[tuple[int, float | None]]] = {}

    def clear(self) -> None:
        self._series.clear()

    def sample(self, state: NodeState) -> None:
        second = int(state.time)
        for gpu in state.gpus.values():
            telemetry = getattr(gpu, "telemetry", None)
            values = {name: fmt.number(fmt.get(telemetry, name)) for name in TELEMETRY_SERIES}
            values["inflation"] = fmt.number(fmt.get(inflation_of(gpu), "inside_p50"))
            values["queue"] = float(len(gpu.region_queue) + gpu.queued)
            for name, value in values.items():
                series = self._series.setdefault((gpu.uuid, name), [])
                if series and series[-1][0] == second:
                    series[-1] = (second, value)
                elif series and series[-1][0] > second:  # the clock went back: a seek
                    series[:] = [(second, value)]
                else:
                    series.append((second, value))
                    del series[:-HISTORY_LEN]

    def values(self, uuid: str, name: str) -> list[float | None]:
        return [v for _, v in self._series.get((uuid, name), [])]


@dataclass
class ConsoleModel:
    state: NodeState = field(default_factory=NodeState)
    log: EventLog = field(default_factory=EventLog)
    now: float = 0.0
    history: MetricHistory = field(default_factory=MetricHistory)
    # A cluster console's: every node (cluster/node_summary.py, NodeSummary), the clock
    # they age by, and the node whose state the views above show (None: none yet).
    nodes: list[Any] = field(default_factory=list)
    cluster_now: float = 0.0
    node: str | None = None


def inflation_of(gpu: Any) -> Any:
    """The GPU's inflation estimate inside regions: the canary's where one
    runs and has samples (telemetry.canary), else the one every region's
    own record gives (the node state's `estimate`)."""
    canary = getattr(gpu, "canary", None)
    if fmt.number(fmt.get(canary, "inside_p50")) is not None:
        return canary
    return getattr(gpu, "estimate", None)


def is_canary(cmd: CommandInfo | None) -> bool:
    """The runtime's own canary: a tenant that takes no slot (it has no time
    limit, which every submitted command has)."""
    return cmd is not None and cmd.label == CANARY_LABEL and cmd.timeout_s is None


def tenants_of(state: NodeState, gpu: GpuState) -> tuple[int, bool]:
    """The commands running in the GPU's slots, and whether its canary runs too."""
    canary = sum(1 for cid in gpu.running if is_canary(state.commands.get(cid)))
    return len(gpu.running) - canary, canary > 0


def running_text(state: NodeState, gpu: GpuState) -> str:
    """`3/4` of the slots, and ` +c` when the canary (which takes none) runs too."""
    tenants, canary = tenants_of(state, gpu)
    return f"{tenants}/{gpu.slots}{' +c' if canary else ''}"


def holder_short(gpu: GpuState) -> str:
    """Who holds the region, in few cells (the panel names the command)."""
    if gpu.region_holder is None:
        return "-"
    if gpu.region_holder == OPERATOR_TENANT and gpu.region_kind == "lease":
        return "operator"
    return f"t{gpu.region_holder}{' lease' if gpu.region_kind == 'lease' else ''}"


def holder_text(state: NodeState, gpu: GpuState) -> str:
    if gpu.region_holder is None:
        return "-"
    if gpu.region_holder == OPERATOR_TENANT and gpu.region_kind == "lease":
        return "operator lease"
    label = ""
    cmd = state.commands.get(gpu.region_command) if gpu.region_command else None
    if cmd is not None and cmd.label:
        label = f" {cmd.label}"
    kind = " lease" if gpu.region_kind == "lease" else ""
    region_set = f" (region {gpu.region_seq} over GPUs {','.join(map(str, gpu.region_gpus))})" if gpu.region_gpus else ""
    return f"t{gpu.region_holder}{label}{kind}{region_set}"


def lease_text(gpu: GpuState) -> str:
    if gpu.region_kind == "lease" and gpu.region_holder is not None:
        return "operator" if gpu.region_holder == OPERATOR_TENANT else f"t{gpu.region_holder}"
    if any(q.get("kind") == "lease" for q in gpu.region_queue):
        return "pending"
    return "-"


def admission_text(state: NodeState, gpu: GpuState) -> str:
    if state.paused:
        return "node paused"
    return "paused" if gpu.paused else "open"


def count_text(v: Any) -> str:
    return fmt.NA if v is None else str(v)


def gpu_figures(state: NodeState, gpu: GpuState, now: float) -> dict[str, str]:
    """Every per-GPU figure the overview shows, as text ("n/a" when absent)."""
    telemetry = getattr(gpu, "telemetry", None)
    estimate = inflation_of(gpu)
    hold = now - gpu.region_since if gpu.region_since is not None else None
    return {
        "gpu": f"{gpu.index} {gpu.name}{' (sim)' if gpu.simulated else ''}{' (AMD)' if gpu.vendor == 'amd' else ''}",
        "uuid": gpu.uuid,
        "holder": holder_text(state, gpu),
        "hold": fmt.duration(hold) if hold is not None else "-",
        "region_queue": str(len(gpu.region_queue)),
        "admission_queue": str(gpu.queued),
        "running": running_text(state, gpu),
        "parked": count_text(getattr(gpu, "parked", None)),
        "draining": count_text(getattr(gpu, "draining", None)),
        "frozen": str(len(gpu.frozen)),
        "inflation_p50": fmt.inflation(fmt.get(estimate, "inside_p50")),
        "inflation_p95": fmt.inflation(fmt.get(estimate, "inside_p95")),
        "util": fmt.percent(fmt.get(telemetry, "util_pct")),
        "memory": fmt.memory(fmt.get(telemetry, "mem_used"), fmt.get(telemetry, "mem_total")),
        "sm_clock": fmt.value(fmt.get(telemetry, "sm_clock_mhz"), "MHz"),
        "temp": fmt.value(fmt.get(telemetry, "temp_c"), "C"),
        "lease": lease_text(gpu),
        "admission": admission_text(state, gpu),
    }


def tenant_state(gpu: GpuState, cmd: CommandInfo) -> str:
    """What a running command is doing with respect to its GPU's region."""
    if cmd.tenant_id is not None and cmd.tenant_id == gpu.region_holder:
        return "holding region"
    if cmd.tenant_id in gpu.frozen:
        return "frozen"
    for position, request in enumerate(gpu.region_queue, start=1):
        if request.get("tenant_id") == cmd.tenant_id:
            return f"waiting for region (#{position})"
    return "running"


def gpu_by_uuid(state: NodeState, uuid: str) -> GpuState | None:
    return next((g for g in state.gpus.values() if g.uuid == uuid), None)
