"""Whole-device leases: an operator's (`krex lease` / `krex release`) and a
command's (`krex run --lease`).

A lease is a region request of kind "lease" (region_manager.py): it goes
ahead of queued regions, freezes every other tenant of the GPU and is held
until released or its TTL passes. While a GPU is leased, admission to it
stops.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from krex_runtime.regions.region_manager import RegionManager
from krex_runtime.regions.requests import OPERATOR, RegionRefused, Request
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError


class LeasedCommand(Protocol):
    """What a command's lease reads of the command (the dispatcher's Job)."""

    @property
    def id(self) -> str: ...

    @property
    def gpu(self) -> int | None: ...

    @property
    def tenant_id(self) -> int | None: ...

    @property
    def timeout_s(self) -> float | None: ...


class Admission(Protocol):
    """Admission to the GPUs (the dispatcher), which an operator's lease stops
    on its GPU and starts again when it ends."""

    leased_gpus: set[int]  # GPUs no command is admitted to

    def pump(self) -> None: ...  # admit what may start now


class CommandLeases:
    """Whole-device leases for commands submitted with `lease`: the dispatcher
    takes one before such a command starts."""

    def __init__(self, manager: RegionManager) -> None:
        self.manager = manager

    async def for_command(self, job: LeasedCommand) -> Callable[[], None]:
        """The whole GPU for one command, granted before it starts; returns the release."""
        assert job.gpu is not None
        region = self.manager.new_lease(job.gpu, job.tenant_id or 0, job.id, job.timeout_s)
        await region.granted
        return lambda: self.manager.release(region, "command ended")


class LeaseDesk:
    """Operators' leases (`krex lease`): held until released or expired, with
    admission to the GPU stopped meanwhile."""

    def __init__(self, manager: RegionManager, admission: Admission, default_ttl_s: float) -> None:
        self.manager = manager
        self.admission = admission
        self.default_ttl_s = default_ttl_s
        self._operator: dict[int, Request] = {}
        self._watches: set[asyncio.Task[None]] = set()  # referenced while they run: the loop keeps weak ones

    async def lease(self, gpu: int, ttl_s: float | None) -> dict[str, Any]:
        """Wait for the GPU and hold it for the operator; refuses a second lease."""
        if gpu in self._operator:
            raise ProtocolError(ErrorCode.REFUSED, f"GPU {gpu} is already leased")
        ttl = ttl_s if ttl_s is not None else self.default_ttl_s
        if ttl <= 0:
            raise ProtocolError(ErrorCode.BAD_REQUEST, "ttl_s must be positive")
        self.admission.leased_gpus.add(gpu)
        region = self.manager.new_lease(gpu, OPERATOR, "", ttl)
        self._operator[gpu] = region
        try:
            await region.granted
        except RegionRefused as exc:
            self._end(gpu)
            raise ProtocolError(ErrorCode.REFUSED, f"lease of GPU {gpu} refused: {exc.reason}") from None
        watch = asyncio.create_task(self._watch(gpu, region))
        self._watches.add(watch)
        watch.add_done_callback(self._watches.discard)
        return {"gpu": gpu, "region": region.seq, "ttl_s": ttl, "expires_at": time.time() + ttl}

    def release(self, gpu: int) -> dict[str, Any]:
        region = self._operator.get(gpu)
        if region is None:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"GPU {gpu} is not leased")
        if region.granted.done():
            self.manager.release(region, "released by operator")
        else:
            self.manager.withdraw(region, "released by operator before it was granted")
        self._end(gpu)
        return {"gpu": gpu, "released": True}

    async def _watch(self, gpu: int, region: Request) -> None:
        """A TTL that passes ends the operator's lease like a release does."""
        await region.released.wait()
        if self._operator.get(gpu) is region:
            self._end(gpu)

    def _end(self, gpu: int) -> None:
        self._operator.pop(gpu, None)
        self.admission.leased_gpus.discard(gpu)
        self.admission.pump()
