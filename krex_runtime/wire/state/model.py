"""The shape of a node's state: its GPUs, its commands and the node itself.

wire/state/reducer.py folds events into it; wire/state/apply.py gathers what readers use
(these classes, `apply`, snapshots).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.wire.state.events import DEFAULT_KEEP_FINISHED

# Regions kept per command: a timing loop that enters a region per iteration
# must not grow the node state (and every snapshot) without bound.
REGIONS_KEPT = 64


@dataclass
class GpuState:
    index: int
    uuid: str
    name: str
    memory_total: int
    simulated: bool
    slots: int
    cpus: list[int] = field(default_factory=list)
    vendor: str = "nvidia"  # "nvidia" or "amd" (a trace from before AMD support has none: NVIDIA's)
    running: list[str] = field(default_factory=list)
    queued: int = 0
    paused: bool = False
    started: int = 0
    finished: int = 0
    region_holder: int | None = None  # tenant id; 0 is an operator's lease
    region_kind: str = ""
    region_command: str = ""
    region_seq: int | None = None
    region_gpus: list[int] = field(default_factory=list)  # a region over a set of GPUs: the set (same seq on each)
    region_since: float | None = None
    region_queue: list[dict[str, Any]] = field(default_factory=list)
    frozen: list[int] = field(default_factory=list)
    regions_granted: int = 0
    last_region: dict[str, Any] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)  # released regions per certificate verdict
    share_region_s: dict[str, float] = field(default_factory=dict)  # region seconds held per fair-share key
    telemetry: dict[str, Any] = field(default_factory=dict)
    parked: int | None = None
    draining: int | None = None
    canary: dict[str, Any] = field(default_factory=dict)
    # The inflation estimate from what regions already record, with no load of
    # its own (reducer.py, _estimate): {"clock_costs": the last ESTIMATE_WINDOW
    # regions' clock cost, "inside_p50", "inside_p95", "regions", "flagged"}.
    estimate: dict[str, Any] = field(default_factory=dict)
    # The context pool: {"size", "idle", "busy", "warming", "cleaning", "replaced",
    # "reasons": {cause: count}, "workers": {id: {state, pid, tenant_id, served, command}}}
    pool: dict[str, Any] = field(default_factory=dict)
    # Forked mode's zygote: {"id", "state" (starting | ready | failed | stopped), "pid",
    # "import_s", "modules", "reason", "forks", "restarts"}; empty without one.
    zygote: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommandInfo:
    id: str
    argv: list[str]
    label: str = ""
    gpu_request: int | None = None
    timeout_s: float | None = None
    state: str = "queued"
    gpu: int | None = None
    pid: int | None = None
    tenant_id: int | None = None
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    mode: str = "process"
    worker: str | None = None
    gpus: list[int] = field(default_factory=list)  # placed on a set of GPUs: the set (`gpu` its first); else empty
    # Its regions, in grant order (the first REGIONS_KEPT; region_count counts all):
    # {region, gpu, kind, granted_at, wait_s, enter_s, sm_clock_mhz, throttle, flags,
    #  released_at, hold_s, reason, verdict, gpus}. The result record carries them: a
    # region over a set of GPUs has a record per GPU, each with the one region id and `gpus`.
    regions: list[dict[str, Any]] = field(default_factory=list)
    region_count: int = 0
    auto_regions: list[str] = field(default_factory=list)  # what auto-regions wrapped
    unprotected_timings: int = 0  # CUDA-event timings no region covered (policy krex)
    untracked_timings: int = 0  # CUDA-event timings the library could not track: known neither way
    evaluation: dict[str, Any] | None = None  # what its KREX-EVAL-RESULT line said (wire/evaluation_record.py)


@dataclass
class NodeState:
    node: str = ""
    policy: str = ""
    pid: int = 0
    started_at: float = 0.0
    stopping: bool = False
    paused: bool = False
    seq: int = 0
    time: float = 0.0
    gpus: dict[int, GpuState] = field(default_factory=dict)
    commands: dict[str, CommandInfo] = field(default_factory=dict)
    queue: list[str] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    keep_finished: int = DEFAULT_KEEP_FINISHED
    finished_order: deque[str] = field(default_factory=deque)
