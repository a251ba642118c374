"""Where a region gets granted on one GPU (`GpuRegions`; the node's front door
to them all is region_manager.py): per GPU, a queue of requests (fair share across
share keys, FIFO within one: region_shares.py) and at most one holder.

Entry, for tenant T on GPU g (each step timed and traced): close the gate ->
wait until no other tenant is inside a gated call that may perturb the region
(quiesce.py; one inside context creation or module loading is let finish) ->
drain (backend) -> freeze the other tenants' trees -> pin T's measuring thread
to g's reserved cores -> settle (settle.py: wait, bounded, for the SM clock to
be back near its baseline) -> GRANTED. Exit: certify (certificate.py) -> unpin
-> thaw -> release the backend's locks -> reopen the gate -> next. The SM
clock, power and temperature are read at the grant and at the release.

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
from collections.abc import Mapping
from dataclasses import dataclass, field

from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.node.sink import EventSink
from krex_runtime.regions import cpu_slices
from krex_runtime.regions.certificate import Certifier, certify
from krex_runtime.regions.cpu_slices import CpuPlan
from krex_runtime.regions.entry_hints import told
from krex_runtime.regions.freezer import FreezeError, Freezer, Target, is_stopped
from krex_runtime.regions.gap import Gap
from krex_runtime.regions.gate import Gate, ProcEntry
from krex_runtime.regions.gate_backends import DrainReport, GateBackend
from krex_runtime.regions.gate_layout import HOST_SIDE_CLASSES, HOST_SIDE_MASK
from krex_runtime.regions.gpu_sets import NO_SHARED, SharedHolds
from krex_runtime.regions.hold_processes import HeldBack
from krex_runtime.regions.late_freeze import LateFreeze, Pending, split_freeze
from krex_runtime.regions.quiesce import deferred, describe, quiesce
from krex_runtime.regions.region_shares import RegionShares
from krex_runtime.regions.region_stats import EntryStats, ExitStats
from krex_runtime.regions.requests import Entry, RegionRefused, Request
from krex_runtime.regions.settle import ClockProbe, settle
from krex_runtime.wire import events

log = logging.getLogger("krex.regions")


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
    entry_waits_for: str = "perturbing"  # "perturbing" | "all" (quiesce.py)
    host_side_wait_s: float = 2.0  # before the close, for host-side calls in progress (HOST_SIDE_CLASSES); 0: never


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
        self._tenants = tenants
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
            entry = await asyncio.to_thread(self._enter, req, gap_s)
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
        self.fair.charge(req.share, hold_s)
        try:
            exit_stats = await asyncio.to_thread(self._exit, req, entry)
        finally:
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
            self._tenants.end(req.command_id, req.reason)
        else:
            req.reason = f"held past the {req.limit_s:g} s limit: region revoked"
        req.revoked = True
        req.released.set()  # what the holder does next changes nothing
        log.warning("GPU %d region %d (tenant %d): %s", self.gpu, req.seq, req.tenant_id, req.reason)

    # --- entry and exit (worker thread) ---------------------------------------------

    def _enter(self, req: Request, gap_s: float) -> Entry:
        """`gap_s`: how long the gate stayed open before it for the work the last region held back."""
        t = [time.monotonic()]

        def lap() -> float:
            t.append(time.monotonic())
            return t[-1] - t[-2]

        stats = EntryStats(wait_s=t[0] - req.requested_at, gap_s=gap_s)
        holder = req.tenant_id  # OPERATOR for an operator's lease: nobody passes
        stats.host_side_s, stats.host_side_left = self._let_host_side_finish(holder)
        lap()
        self.gate.close_gate(holder)
        stats.close_s = lap()
        # A lease waits for every call: it freezes everyone and its entry is not in a hurry.
        every_call = self.settings.entry_waits_for == "all" or req.kind == "lease"
        # Tenants placed on several GPUs: the entry steps that touch them run one GPU
        # at a time, and those another GPU's region froze are left to it (gpu_sets.py).
        sharers = [(t.tenant_id, t.command_id) for t in self._tenants.of_gpu(self.gpu) if t.tenant_id != req.tenant_id]
        shared = self.shared.enter(self.gpu, sharers) if self.shared is not None else NO_SHARED
        skip = shared.skip
        report = DrainReport()
        targets: list[Target] = []
        left_running: list[ProcEntry] = []
        # Tenants frozen because the gate cannot hold them: a process of theirs on
        # the GPU without the library (hold_processes.py), a claim of a call in
        # flight past the quiesce bound (entry_hints.py).
        held = HeldBack(self.freezer, self._tenants, holder, {req.tenant_id, *skip})
        try:
            # What entries say is checked against the GPU: a process it knows no
            # context of has nothing in flight there (entry_hints.py).
            contexts = self._contexts() if self.gate.others(holder, skip) else None
            no_context = frozenset(e.pid for e in self.gate.others(holder, skip)
                                   if contexts is not None and e.pid not in contexts)
            q = quiesce(self.gate, holder, self.settings.quiesce_timeout_s, every_call=every_call, skip=skip,
                        no_context=no_context, contexts_known=contexts is not None)
            stats.quiesce_s = lap()
            stats.inside_at_close, stats.waited_for = q.inside_at_close, q.waited_for
            overdue = self._hold_overdue(q.busy, held)
            # Inside a host-side call still (quiesce.py): drained, held by the gate, not locked.
            # Tenants of several GPUs are drained by their library, never driver-locked (gpu_sets.py).
            by_library = {e.pid for e in q.deferred} | {
                e.pid for e in self.gate.others(holder, skip) if e.tenant_id in shared.shared}
            report = self.backend.drain(self.gate, holder, self.settings.drain_timeout_s, by_library, skip | overdue,
                                        no_context)
            stats.drain_s = lap()
            if report.stuck:
                raise RegionRefused(
                    "ETIMEDOUT",
                    "tenants did not drain within "
                    f"{self.settings.drain_timeout_s:g} s: " + ", ".join(f"pid {p} ({r})" for p, r in report.stuck.items()),
                )
            frozen: list[int] = sorted(overdue)
            late: Pending = {}  # frozen once out of their calls
            # Still inside a host-side call: frozen once out of it, during the hold (late_freeze.py).
            # Read after the drain: those whose calls returned meanwhile are frozen now.
            left_running = deferred(self.gate, holder, skip | overdue, frozenset(q.unfounded)) \
                if q.deferred else []  # none can join after the close
            stats.deferred = describe(left_running)
            if self.settings.protection == "gpu+cpu" or req.kind == "lease":
                others = [t for t in self._tenants.of_gpu(self.gpu)
                          if t.tenant_id not in skip | overdue | {req.tenant_id}]
                targets, now, late = split_freeze(others, left_running)
                try:
                    self.freezer.freeze(targets)
                except FreezeError as exc:
                    raise RegionRefused("EAGAIN", f"could not freeze the other tenants: {exc}") from None
                frozen = frozen + now + sorted(skip)  # skip: frozen by another GPU's region, for this one's hold too
            held.already |= set(frozen) | set(late)
            # Whatever the protection: a tenant with a process on this GPU that its
            # gate cannot hold (no interception library; or a tenant of another GPU
            # using this one) is frozen, or nothing would stop it (hold_processes.py).
            for who in self.certifier.ungated(holder) if self.certifier is not None else []:
                held.hold(who)
            extra, extra_ids = held.taken()
            targets, frozen = targets + extra, sorted(set(frozen + extra_ids), key=(frozen + extra_ids).index)
            held.clear()  # the entry thaws these with its own
            if self.shared is not None:
                self.shared.hold(self.gpu, shared, sharers, targets)
            stats.freeze_s = lap()
            pinned = False
            if req.tid:  # under either protection (machinery.cpu_plan says why)
                pinned = cpu_slices.pin_thread(req.pid, req.tid, self.cpus.reserved_cores(self.gpu))
            stats.pin_s = lap()
        except BaseException:
            # Give back everything this entry took, whatever went wrong.
            self.freezer.thaw(self._let_go(targets + held.taken()[0]))
            self.backend.release(report)
            self.gate.open_gate()
            raise
        finally:
            if self.shared is not None:
                self.shared.leave(shared)
        settle_s = 0.0  # a lease measures nothing
        if req.kind == "region":
            settle_s = self.settings.settle_max_s if req.settle_s is None else req.settle_s  # its own bound first
        clock = settle(self.clock_probe, self.gpu, settle_s, self.settings.settle_poll_s)
        stats.take_clock(clock)
        stats.settle_max_s = settle_s
        lap()
        stats.enter_s = t[-1] - t[0]
        # Calls the other tenants have made so far, per the interception counters:
        # the same figure at release proves none of them submitted meanwhile.
        stats.others_calls = self._others_calls(holder)
        # CLOCK_MONOTONIC, as the simulator's execution log and the gate use.
        stats.granted_mono_ns = time.monotonic_ns()
        overdue = [f"tenant {e.tenant_id} (pid {e.pid}) still claimed a GPU call in flight at the "
                   f"{self.settings.quiesce_timeout_s:g} s quiesce bound: frozen, its work in flight not drained"
                   for e in q.busy]
        witness = self.certifier and self.certifier.start(
            holder, req.pid, clock, req.tid, left_running, held.hold,
            lies=list(q.unfounded.values()), overdue=overdue, frozen=frozenset(frozen))
        return Entry(targets, frozen, report, pinned, stats, witness,
                     LateFreeze(self.gate, self.freezer, late) if late else None, held)

    def _let_host_side_finish(self, holder: int) -> tuple[float, int]:
        """Before the gate closes: where another tenant is inside a context
        creation, a module load or a memory allocation or release (each
        touches the device, and slowed the trials of regions they overlapped:
        docs/BENCHMARKS.md), park every new
        such call and wait, bounded by `host_side_wait_s`, for those in
        progress; everyone's GPU work goes on meanwhile. Returns the seconds
        waited and how many processes were still inside at the bound (their
        calls then overlap the region, which its certificate says)."""
        bound = self.settings.host_side_wait_s
        if bound <= 0:
            return 0.0, 0

        def inside() -> list[ProcEntry]:  # a stopped process cannot finish its call: not waited for
            return [e for e in self.gate.inside_classes(holder, HOST_SIDE_CLASSES) if not is_stopped(e.pid)]

        if not inside():
            return 0.0, 0
        t0 = time.monotonic()
        self.gate.close_classes(holder, HOST_SIDE_MASK)
        pause, left = 200e-6, inside()
        while left and time.monotonic() - t0 < bound:
            time.sleep(pause)
            pause = min(pause * 2, 5e-3)
            left = inside()
        return time.monotonic() - t0, len(left)

    def _contexts(self) -> set[int] | None:
        """The pids with a context on this GPU, as the GPU says (None: it cannot)."""
        if self.certifier is None:
            return None
        try:
            return self.certifier.processes.contexts(self.gpu)
        except Exception:  # missing data is a value: every claim stands
            return None

    def _hold_overdue(self, busy: list[ProcEntry], held: HeldBack) -> frozenset[int]:
        """Processes still claiming a call in flight at the quiesce bound: the
        bound is the operator's, so the claim delays the region no further; their
        tenants are frozen for the hold, not drained (entry_hints.py). One that
        cannot be frozen (no running command holds it) refuses the region, as before."""
        if not busy:
            return frozenset()
        stuck = [e for e in busy if not held.hold_tenant(e.tenant_id)]
        if stuck:
            raise RegionRefused(
                "ETIMEDOUT",
                "tenants still inside a GPU call after "
                f"{self.settings.quiesce_timeout_s:g} s: " + ", ".join(f"pid {e.pid}" for e in stuck),
            )
        for e in busy:
            told(e.tenant_id, e.pid, f"still claimed a GPU call in flight at the "
                                     f"{self.settings.quiesce_timeout_s:g} s quiesce bound: tenant frozen for the region")
        return frozenset(e.tenant_id for e in busy)

    def _let_go(self, targets: list[Target]) -> list[Target]:
        """What a region froze, less what another GPU's region still holds frozen (gpu_sets.py)."""
        return self.shared.let_go(self.gpu, targets) if self.shared is not None else targets

    def _others_calls(self, holder: int) -> int:
        return sum(e.calls_total for e in self.gate.others(holder))

    def _exit(self, req: Request, entry: Entry) -> ExitStats:
        released_mono_ns = time.monotonic_ns()
        others_calls = self._others_calls(req.tenant_id)
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
            self.freezer.thaw(self._let_go(entry.targets + late_targets + held_targets))
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
        if self.holder is not None:
            self.release(self.holder, "runtime shutting down")
        while self.holder is not None:
            await asyncio.sleep(0.005)
        if self._task is not None:
            self._task.cancel()
        self.gate.open_gate()


def _fail(req: Request, exc: RegionRefused) -> None:
    if not req.granted.done():
        req.granted.set_exception(exc)
        req.granted.exception()  # retrieved: nobody may be awaiting it
