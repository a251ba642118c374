"""Who used the GPU while a region was held: every process, not only those
alive at its release.

The certificate's process witness (certificate.py) once compared the GPU's
process list at the grant with the one at the release, so a process that
ran inside the region and ended before the release left no trace: a tenant
that started a child without the interception library (no gate holds it)
ran that child's kernel inside another tenant's region, and the region was
certified `verified` (issue 47, F5). Now the witness reads three things:

- the GPU's activity at the grant and at the release (telemetry/
  gpu_processes.py: on the simulator every slot that ran work, dead ones
  and the ones the driver reaped included; on NVML the running compute
  processes, accounting mode's records and the utilisation samples' pids
  since the grant);
- while the region is held, the GPU's running processes every
  `regions.hold_sample_s` (HoldSampler), learning who each new one is while
  it lives: which tenant, and whether it has an entry in the GPU's gate. A
  CUDA process lives at least as long as its context takes to create (0.2 s
  and more on an H100), longer than the interval;
- a process that the gate cannot hold (a tenant's, with no gate entry) is
  held back at once: its tenant is frozen for the rest of the hold
  (HeldBack), whatever the protection. Entry does the same for those already
  on the GPU (region_entry.py). Under `gpu-only` such a tenant was never
  frozen, and a tenant placed on another GPU, using this one, was not one of
  its tenants to freeze: the two ways the child had run.

Sampling is the runtime's own reading of its GPU and /proc, on the runtime's
cores, never on the measuring thread's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.regions.freezer import FreezeError, Freezer, Target

log = logging.getLogger("krex.regions")


@dataclass(frozen=True)
class Seen:
    """A process seen on the GPU, as it was learnt while it lived."""

    pid: int
    start_time: int  # 0: not known (it had ended)
    tenant: int | None  # the running command it belongs to (None: none, or not known)
    is_tenant: bool  # a process of this runtime's tenants (idle context processes too)
    gated: bool  # the GPU's gate holds it: it has an entry there, or acts for commands that do


class HoldSampler:
    """Reads the GPU's running processes every `interval_s` while a region is
    held; `learn` says who a new one is; `on_new` is told of each."""

    def __init__(self, running: Callable[[], dict[int, Any] | None], learn: Callable[[int], Seen],
                 interval_s: float, known: dict[int, Seen], on_new: Callable[[Seen], None] | None = None) -> None:
        self._running, self._learn, self._on_new = running, learn, on_new
        self._interval = interval_s
        self.seen: dict[int, Seen] = dict(known)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="krex-hold-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        try:
            running = self._running()
        except Exception:  # missing data is a value: the ends still read
            return
        for pid in (running or {}):
            known = self.seen.get(pid)
            if known is not None and known.tenant is not None:
                continue
            who = self._learn(pid)  # again, where whose it is was not known yet (its command starting)
            self.seen[pid] = who
            if self._on_new is not None and (known is None or who.tenant is not None):
                self._on_new(who)

    def stop(self) -> dict[int, Seen]:
        """Stop sampling, after one last look; what was seen."""
        self._stop.set()
        self._thread.join()
        self.sample()
        return dict(self.seen)


@dataclass
class HeldBack:
    """Tenants a region froze because a process of theirs used its GPU with no
    gate to hold it (at entry, or seen during the hold); thawed at its exit."""

    freezer: Freezer
    tenants: TenantRegistry
    holder: int
    already: set[int]  # tenant ids the entry froze, or the holder's
    targets: list[Target] = field(default_factory=list)
    tenant_ids: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def hold(self, who: Seen) -> None:
        """Freeze the tenant of `who` if it is a process the gate cannot hold."""
        if not who.is_tenant or who.gated or who.tenant is None or who.tenant == self.holder:
            return
        if self.hold_tenant(who.tenant):
            log.warning("tenant %d's pid %d uses the GPU with no gate to hold it: tenant frozen for the region",
                        who.tenant, who.pid)

    def hold_tenant(self, tenant_id: int) -> bool:
        """Freeze a tenant for the rest of the hold; False where no running command is it."""
        with self._lock:
            if tenant_id in self.already:
                return True
            tenant = self.tenants.tenant(tenant_id)
            if tenant is None or tenant_id == self.holder:
                return tenant_id == self.holder
            self.already.add(tenant_id)
            target = Target(tenant.command_id, tenant.pid, cgroup=tenant.cgroup)
            self.targets.append(target)  # noted first: a freeze that fails halfway is thawed too
            self.tenant_ids.append(tenant_id)
            try:
                self.freezer.freeze([target])
            except (FreezeError, OSError) as exc:
                log.warning("tenant %d could not be frozen: %s", tenant_id, exc)
            return True

    def taken(self) -> tuple[list[Target], list[int]]:
        with self._lock:
            return list(self.targets), list(self.tenant_ids)

    def clear(self) -> None:
        """Forget what was frozen so far (the entry thaws it with its own); what comes later is this one's."""
        with self._lock:
            self.targets.clear()
            self.tenant_ids.clear()
