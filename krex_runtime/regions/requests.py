"""A region request as the GPU's queue holds it, what its entry took, and the
refusal it ends with when it is not granted (gpu_regions.py serves them; the
channel and the lease desk make them through region_manager.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.host.fair_share import DEFAULT_KEY
from krex_runtime.regions.certificate import Witness
from krex_runtime.regions.entry.hold_processes import HeldBack
from krex_runtime.regions.entry.late_freeze import LateFreeze
from krex_runtime.regions.freezer import Target
from krex_runtime.regions.gate.backends import DrainReport
from krex_runtime.regions.region_stats import EntryStats

# The holder id a gate names during an operator's lease: tenant ids start at 1,
# so no process passes.
OPERATOR = 0


class RegionRefused(Exception):
    """The region could not be granted; `code` is an errno name for the channel."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass
class Request:
    seq: int
    gpu: int
    kind: str  # "region" | "lease"
    tenant_id: int
    command_id: str
    pid: int
    tid: int
    limit_s: float | None
    requested_at: float = field(default_factory=time.monotonic)
    granted: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    released: asyncio.Event = field(default_factory=asyncio.Event)
    withdrawn: bool = False
    revoked: bool = False
    reason: str = ""
    flags: list[str] = field(default_factory=list)  # why its measurements may be off
    exit_clock: dict[str, Any] | None = None  # the SM clock, power and temperature at its release
    entry: Entry | None = None  # what its entry took, once granted
    certified: asyncio.Event = field(default_factory=asyncio.Event)  # its verdict is in (regions/certificate.py)
    verdict: tuple[str, list[str]] = ("unknown", ["not released yet"])
    share: str = DEFAULT_KEY  # its command's share key (host/fair_share.py)
    settle_s: float | None = None  # the settle bound it asked for (ENTER); None: regions.settle_max_s
    integrity: dict[str, Any] | None = None  # its timed windows, as its tenant reported at EXIT (region_wire.py)
    gpus: tuple[int, ...] = ()  # part of a region over this set of GPUs (gpu_sets.py); (): this GPU alone

    @property
    def set_field(self) -> list[int] | None:
        """The events' `gpus`: the set this request is part of, None on one GPU."""
        return list(self.gpus) if self.gpus else None


@dataclass
class Entry:
    """What an entry took, so the exit gives exactly that back."""

    targets: list[Target]
    frozen_tenants: list[int]
    report: DrainReport
    pinned: bool
    stats: EntryStats
    witness: Witness | None = None  # what the exclusivity certificate compares the release with
    late: LateFreeze | None = None  # freezes, during the hold, the tenants entry left inside a host-side call
    held: HeldBack | None = None  # tenants frozen during the hold: a process of theirs the gate cannot hold came
