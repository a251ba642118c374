"""The node's region queues: one `GpuRegions` per GPU (manager.py), with one
numbering of requests for the whole node."""

from __future__ import annotations

import asyncio
import itertools

from krex_runtime.commands.tenants import TenantRegistry
from krex_runtime.regions.manager import GpuRegions
from krex_runtime.regions.requests import Request


class RegionManager:
    """The GPUs' region queues, with one numbering of requests for the node."""

    def __init__(self, regions: dict[int, GpuRegions], tenants: TenantRegistry) -> None:
        self.gpus = regions
        self._tenants = tenants  # a request's share key is its command's
        self._seq = itertools.count(1)

    def start(self) -> None:
        for r in self.gpus.values():
            r.start()

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
    ) -> Request:
        req = Request(next(self._seq), gpu, kind, tenant_id, command_id, pid, tid, limit_s,
                      share=self._tenants.share_of(command_id), settle_s=settle_s)
        self.gpus[gpu].submit(req)
        return req

    def uncertified(self, command_id: str) -> list[asyncio.Event]:
        """The certificates this command's regions are still owed, on every GPU."""
        return [e for r in self.gpus.values() for e in r.uncertified(command_id)]

    def stamp_heartbeats(self) -> None:
        for r in self.gpus.values():
            r.gate.stamp_heartbeat()

    async def shutdown(self) -> None:
        await asyncio.gather(*(r.shutdown() for r in self.gpus.values()))
