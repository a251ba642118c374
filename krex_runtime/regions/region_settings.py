"""The settings one GPU's regions are served by (the node config's
`regions.*`, typed): what a region's entry waits for and how long, how a
hold is bounded, and how the queue shares the GPU. Built by machinery.py;
read by gpu_regions.py (the queue and the hold) and region_entry.py (the
entry's steps)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RegionSettings:
    protection: str  # "gpu+cpu" | "gpu-only"
    hold_limit_s: float
    on_hold_limit: str  # "revoke" | "kill"
    quiesce_timeout_s: float
    drain_timeout_s: float
    settle_max_s: float = 0.0  # 0: no settle
    settle_poll_s: float = 0.001
    gap_s: float = 0.0  # the gate's open time between two regions (gap.py)
    share_weights: Mapping[str, float] = field(default_factory=dict)  # share key -> weight (default 1)
    entry_waits_for: str = "perturbing"  # "perturbing" | "all" (entry/quiesce.py)
    host_side_wait_s: float = 2.0  # before the close, for host-side calls in progress (HOST_SIDE_CLASSES); 0: never
