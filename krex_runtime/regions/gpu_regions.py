"""Where a region gets granted on one GPU (`GpuRegions`; the node's front door
to them all is region_manager.py): per GPU, a queue of requests (fair share across
share keys, FIFO within one: region_shares.py) and at most one holder.

Entry, for tenant T on GPU g (region_entry.py runs its steps, each timed and
traced, and gives back what they took if one fails): close the gate -> wait
until no other tenant is inside a gated call that may perturb the region
(entry/quiesce.py; one inside context creation or module loading is let
finish) -> drain (backend) -> freeze the other tenants' trees -> pin T's
measuring thread to g's reserved cores -> settle (entry/settle.py: wait,
bounded, for the SM clock to be back near its baseline) -> GRANTED. Exit:
certify (certificate.py) -> unpin -> thaw -> release the backend's locks ->
reopen the gate -> next. The SM clock, power and temperature are read at the
grant and at the release.

A whole-device lease is a request of kind "lease": it goes ahead of queued
regions (after the current holder), always freezes, and is held until
released or its TTL passes. The blocking steps run in a worker thread per GPU
so the service's event loop keeps answering while a GPU drains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.node.sink import EventSink
from krex_runtime.regions.certificate import Certifier, certify
from krex_runtime.regions.entry import cpu_slices
from krex_runtime.regions.entry.cpu_slices import CpuPlan
from krex_runtime.regions.entry.settle import ClockProbe
from krex_runtime.regions.freezer import Freezer, Target
from krex_runtime.regions.gap import Gap
from krex_runtime.regions.gate.backends import GateBackend
from krex_runtime.regions.gate.core import Gate
from krex_runtime.regions.gpu_sets import SharedHolds
from krex_runtime.regions.region_entry import enter
from krex_runtime.regions.region_settings import RegionSettings
from krex_runtime.regions.region_shares import RegionShares
from krex_runtime.regions.region_stats import ExitStats
from krex_runtime.regions.requests import Entry, RegionRefused, Request
from krex_runtime.wire.state import events

log = logging.getLogger("krex.regions")


class GpuRegions:
    def __init__(
        self,
        gpu: int,
        gate: Gate,
        backend: GateBackend,
        freezer: Freezer,
        cpus: CpuPlan,
        settings: RegionSettings,
        tenants: TenantRegistry,
        sink: EventSink,
        clock_probe: ClockProbe,
    ) -> None:
        self.gpu = gpu
        self.gate = gate
        self.backend = backend
        self.freezer = freezer
        self.cpus = cpus
        self.settings = settings
        self.tenants = tenants
        self._emit = sink.emit
        self.queue: deque[Request] = deque()
        self.holder: Request | None = None
        self.serving: Request | None = None  # the request between its turn and its certificate
        # SM clock, throttle reasons and flags now, recorded at every entry.
        self.clock_probe = clock_probe
        self.certifier: Certifier | None = None  # set by the node where it can say who uses the GPU
        self.fair = RegionShares(dict(settings.share_weights))
        self.shared: SharedHolds | None = None  # tenants placed on several GPUs (set by the manager: gpu_sets.py)
        self.gap = Gap(settings.gap_s)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._serve(), name=f"regions-gpu{self.gpu}")
        self._task.add_done_callback(self._served)

    def _served(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.critical("GPU %d: the region loop died", self.gpu, exc_info=task.exception())

    def uncertified(self, command_id: str) -> list[asyncio.Event]:
        """The certificate this command's region is still owed: granted, not
        yet certified (the command's result waits for its verdict)."""
        r = self.serving
        if r is None or r.command_id != command_id or r.entry is None or r.certified.is_set():
            return []
        return [r.certified]

    def leased_to(self, tenant_id: int) -> Request | None:
        """The lease this tenant holds on the GPU: its regions are already exclusive."""
        h = self.holder
        return h if h is not None and h.kind == "lease" and h.tenant_id == tenant_id else None

    # --- requests -------------------------------------------------------------

    def submit(self, req: Request) -> None:
        if req.kind == "lease":
            # Operators go first, behind the current holder only.
            leases = sum(1 for r in self.queue if r.kind == "lease")
            self.queue.insert(leases, req)
        else:
            # One being served (entering, or certifying after its release) competes as the holder does.
            self.fair.arrive(req, self.queue, self.holder or self.serving)
            self.queue.append(req)
        self._emit(
            events.RegionRequested(
                gpu=self.gpu, region=req.seq, kind=req.kind, tenant_id=req.tenant_id, command_id=req.command_id,
                gpus=req.set_field,
            )
        )
        self._wake.set()

    def withdraw(self, req: Request, reason: str) -> None:
        """The requester went away or gave up: drop it, or release what it holds."""
        if req.withdrawn or req.released.is_set():
            return
        req.withdrawn, req.reason = True, reason
        if req in self.queue:
            self.queue.remove(req)
            self._refuse(req, RegionRefused("ECANCELED", reason))
        elif self.holder is req:
            req.released.set()
        # A request in the middle of its entry is released when the entry ends.

    def release(self, req: Request, reason: str = "released") -> None:
        if self.holder is req and not req.released.is_set():
            req.reason = reason
            # Unpin before the holder is answered: its thread must not go on
            # working on the reserved cores the next holder will measure on.
            self._unpin(req)
            # The clock the measurement ended at, before the holder hears RELEASED (it carries the flags).
            req.exit_clock = self.clock_probe(self.gpu)
            req.released.set()

    def _refuse(self, req: Request, exc: RegionRefused) -> None:
        """The request ends ungranted: say so in the trace and to whoever waits."""
        self._emit(events.RegionWithdrawn(gpu=self.gpu, region=req.seq, tenant_id=req.tenant_id, reason=exc.reason,
                                          gpus=req.set_field))
        _fail(req, exc)

    def _unpin(self, req: Request) -> None:
        if req.entry is not None and req.entry.pinned:
            cpu_slices.pin_thread(req.pid, req.tid, self.cpus.tenant_cores(self.gpu))
            req.entry.pinned = False

    # --- the serving loop ---------------------------------------------------------

    async def _serve(self) -> None:
        while True:
            while not self.queue:
                self._wake.clear()
                await self._wake.wait()
            gap_s = await self.gap.wait()
            if not self.queue:  # withdrawn during the gap
                continue
            req = self.fair.take(self.queue)  # leases first, then by fair share
            self.serving = req
            try:
                await self._serve_one(req, gap_s)
            except Exception:
                # A bug must not leave the gate shut, tenants frozen or the queue stuck.
                log.exception("GPU %d: region %d failed; reopening the gate", self.gpu, req.seq)
                self.holder = None
                self.gate.open_gate()
                _fail(req, RegionRefused("EIO", "runtime error while serving the region"))
            finally:
                self.serving = None
                if req.entry is not None:
                    req.certified.set()  # nothing waits for a verdict that will not come

    async def _serve_one(self, req: Request, gap_s: float) -> None:
        try:
            entry = await asyncio.to_thread(enter, self, req, gap_s)
        except Exception as exc:
            if not isinstance(exc, RegionRefused):
                log.exception("GPU %d: region %d entry failed", self.gpu, req.seq)
                exc = RegionRefused("EIO", f"runtime error during entry: {exc!r}")
            self._refuse(req, exc)
            return
        self.holder = req
        req.entry = entry
        req.flags = list(entry.stats.flags or [])
        self._emit(
            events.RegionGranted(
                gpu=self.gpu, region=req.seq, kind=req.kind, tenant_id=req.tenant_id, command_id=req.command_id,
                frozen=entry.frozen_tenants, drain={str(pid): r for pid, r in entry.report.outcomes.items()},
                gpus=req.set_field, **entry.stats.event_fields(),
            )
        )
        if req.withdrawn:
            req.released.set()
        elif not req.granted.done():
            req.granted.set_result(None)
        granted_at = time.monotonic()
        try:
            await asyncio.wait_for(req.released.wait(), timeout=req.limit_s)
        except TimeoutError:
            self._overrun(req)
        hold_s = time.monotonic() - granted_at
        try:
            exit_stats = await asyncio.to_thread(self._exit, req, entry)
        finally:
            # Charged in the same step as region_released is emitted, not at the
            # release: a request that arrives during the exit is then levelled
            # as the trace orders it, so the queue's turns replay from the trace.
            self.fair.charge(req.share, hold_s)
            self.holder = None
            req.certified.set()
        self._emit(
            events.RegionReleased(
                gpu=self.gpu, region=req.seq, kind=req.kind, tenant_id=req.tenant_id, reason=req.reason or "released",
                hold_s=hold_s, share=req.share, gpus=req.set_field, **exit_stats.event_fields(),
            )
        )

    def _overrun(self, req: Request) -> None:
        if req.kind == "lease":
            req.reason = "lease expired"
        elif self.settings.on_hold_limit == "kill":
            req.reason = f"held past the {req.limit_s:g} s limit: command killed"
            self.tenants.end(req.command_id, req.reason)
        else:
            req.reason = f"held past the {req.limit_s:g} s limit: region revoked"
        req.revoked = True
        req.released.set()  # what the holder does next changes nothing
        log.warning("GPU %d region %d (tenant %d): %s", self.gpu, req.seq, req.tenant_id, req.reason)

    # --- entry and exit (worker thread) ---------------------------------------------

    def let_go(self, targets: list[Target]) -> list[Target]:
        """What a region froze, less what another GPU's region still holds frozen (gpu_sets.py)."""
        return self.shared.let_go(self.gpu, targets) if self.shared is not None else targets

    def others_calls(self, holder: int) -> int:
        return sum(e.calls_total for e in self.gate.others(holder))

    def _exit(self, req: Request, entry: Entry) -> ExitStats:
        released_mono_ns = time.monotonic_ns()
        others_calls = self.others_calls(req.tenant_id)
        # Released by its holder: read then; withdrawn, revoked or shut down: read now.
        exit_clock = req.exit_clock if req.exit_clock is not None else self.clock_probe(self.gpu)
        certificate = certify(self.certifier, entry.witness, req.tenant_id)
        req.verdict = (certificate.verdict, certificate.reasons)
        # Into the command's result now, before the exit's slower steps: the command may be ending.
        t0 = time.monotonic()
        self._unpin(req)  # done already when the holder released it itself
        t1 = time.monotonic()
        late_targets, late_frozen = entry.late.stop() if entry.late is not None else ([], [])
        held_targets, held_frozen = entry.held.taken() if entry.held is not None else ([], [])  # the sampler has stopped
        late_frozen = late_frozen + held_frozen
        try:
            self.freezer.thaw(self.let_go(entry.targets + late_targets + held_targets))
        except OSError as exc:
            # The freezer tried every tenant; the release goes on, so the gate
            # opens, the release is recorded and the next request is served.
            log.error("GPU %d region %d: a tenant could not be thawed: %s", self.gpu, req.seq, exc)
        t2 = time.monotonic()
        left_locked = self.backend.release(entry.report)
        if left_locked:
            log.warning("GPU %d: processes stopped by someone else stay driver-locked: %s", self.gpu, left_locked)
        held_back = sum(e.parked for e in self.gate.others(req.tenant_id)) + len(entry.report.locked)
        self.gate.open_gate()
        self.gap.released(held_back)
        t3 = time.monotonic()
        stats = ExitStats(
            held_back=held_back, unpin_s=t1 - t0, thaw_s=t2 - t1, late_frozen=late_frozen, open_s=t3 - t2,
            released_mono_ns=released_mono_ns, others_calls=others_calls,
            verdict=req.verdict[0], verdict_reasons=req.verdict[1], integrity=req.integrity,
        )
        stats.take_clock(exit_clock)
        stats.exit_flags += certificate.flags
        return stats

    async def shutdown(self) -> None:
        """Withdraw everything queued and release the holder; the gate ends open."""
        for req in list(self.queue):
            self.withdraw(req, "runtime shutting down")
        holder = self.holder
        if holder is not None:
            self.release(holder, "runtime shutting down")
            await holder.certified.wait()  # set as its exit ends, when the holder is let go
        if self._task is not None:
            self._task.cancel()
        self.gate.open_gate()


def _fail(req: Request, exc: RegionRefused) -> None:
    if not req.granted.done():
        req.granted.set_exception(exc)
        req.granted.exception()  # retrieved: nobody may be awaiting it
