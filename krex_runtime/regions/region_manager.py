"""The node's front door to its regions: every grant, release, withdrawal and
lease lookup goes through `RegionManager`, which routes it to the GPU's
queue (gpu_regions.py), or for a command placed on several GPUs to the
region sets over their queues (gpu_sets.py), and numbers requests once for
the whole node.

The region channel, the lease desk and the service hold a RegionManager,
never a GPU's queue: what a GPU's queue is made of can change without them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.regions.certificate import Certifier, Witness, certify
from krex_runtime.regions.gate.core import Gate
from krex_runtime.regions.gpu_regions import GpuRegions
from krex_runtime.regions.gpu_sets import RegionSet, RegionSets, SharedHolds
from krex_runtime.regions.requests import Request


class RegionManager:
    """The GPUs' region queues, with one numbering of requests for the node."""

    def __init__(self, regions: dict[int, GpuRegions], tenants: TenantRegistry) -> None:
        self._gpus = regions
        self._tenants = tenants  # a request's share key is its command's
        self._seq = itertools.count(1)
        any_gpu = next(iter(regions.values()), None)
        self._sets = RegionSets(
            regions, lambda: any_gpu.settings.on_hold_limit if any_gpu is not None else "revoke", tenants.end
        )
        shared = SharedHolds(
            lambda command_id: sum(1 for g in regions if any(t.command_id == command_id for t in tenants.of_gpu(g)))
        )
        for r in regions.values():
            r.shared = shared

    def start(self) -> None:
        for r in self._gpus.values():
            r.start()

    # --- grant, release, withdraw ---------------------------------------------------

    def new_request(
        self,
        gpu: int,
        kind: str,
        tenant_id: int,
        command_id: str,
        pid: int,
        tid: int,
        limit_s: float | None,
        settle_s: float | None = None,
        gpus: tuple[int, ...] = (),
    ) -> Request | RegionSet:
        """Queues a request on its GPU, or over its set of GPUs (`gpus`, two or more:
        the command's placement); its `granted` future says when it is served."""
        if len(gpus) > 1 and kind == "region":
            share = self._tenants.share_of(command_id)
            rs = RegionSet(next(self._seq), tuple(sorted(gpus)), tenant_id, command_id, pid, tid, limit_s, share, settle_s)
            self._sets.submit(rs)
            return rs
        return self._queue(gpu, kind, tenant_id, command_id, pid, tid, limit_s, settle_s)

    def new_lease(self, gpu: int, tenant_id: int, command_id: str, ttl_s: float | None) -> Request:
        """Queues a whole-device lease of one GPU (leases.py), ahead of its regions; `ttl_s` None: until released."""
        return self._queue(gpu, "lease", tenant_id, command_id, 0, 0, ttl_s, None)

    def _queue(self, gpu: int, kind: str, tenant_id: int, command_id: str, pid: int, tid: int,
               limit_s: float | None, settle_s: float | None) -> Request:
        share = self._tenants.share_of(command_id)
        req = Request(next(self._seq), gpu, kind, tenant_id, command_id, pid, tid, limit_s, share=share, settle_s=settle_s)
        self._gpus[gpu].submit(req)
        return req

    def release(self, req: Request | RegionSet, reason: str = "released") -> None:
        """The holder is done with it (a request not holding its GPU is left as it is)."""
        if isinstance(req, RegionSet):
            self._sets.release(req, reason)
        else:
            self._gpus[req.gpu].release(req, reason)

    def withdraw(self, req: Request | RegionSet, reason: str) -> None:
        """The requester went away or gave up: drop it from its queue, or release what it holds."""
        if isinstance(req, RegionSet):
            self._sets.withdraw(req, reason)
        else:
            self._gpus[req.gpu].withdraw(req, reason)

    # --- lookups ---------------------------------------------------------------------

    def leased_to(self, gpu: int, tenant_id: int) -> Request | None:
        """The lease this tenant holds on the GPU: its regions are already exclusive."""
        return self._gpus[gpu].leased_to(tenant_id)

    def witness_in_lease(self, lease: Request, pid: int, tid: int = 0) -> Witness | None:
        """A region its lease's holder enters (granted at once): the witnesses
        its certificate compares its release with, read now (`tid`: its measuring thread)."""
        r = self._gpus[lease.gpu]
        # Not sampled: the lease's own hold is, and this witness may never be certified (its tenant gone).
        return r.certifier.start(lease.tenant_id, pid, r.clock_probe(lease.gpu), tid, sample=False) \
            if r.certifier is not None else None

    def certify_in_lease(self, lease: Request, witness: Witness | None) -> tuple[str, list[str]]:
        """That region's verdict at its release, at once: the lease it is in ends later."""
        certificate = certify(self._gpus[lease.gpu].certifier, witness, lease.tenant_id)
        return certificate.verdict, certificate.reasons

    def uncertified(self, command_id: str) -> list[asyncio.Event]:
        """The certificates this command's regions are still owed, on every GPU."""
        return [e for r in self._gpus.values() for e in r.uncertified(command_id)]

    # --- wiring and life ---------------------------------------------------------------

    def attach_certifiers(self, make: Callable[[int, Gate], Certifier]) -> None:
        """Each GPU's certificate is made by `make(gpu, its gate)` (set by the node,
        where it can say who uses a GPU)."""
        for index, r in self._gpus.items():
            r.certifier = make(index, r.gate)

    def stamp_heartbeats(self) -> None:
        for r in self._gpus.values():
            r.gate.stamp_heartbeat()

    async def shutdown(self) -> None:
        await self._sets.shutdown()
        await asyncio.gather(*(r.shutdown() for r in self._gpus.values()))
