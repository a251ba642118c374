"""A region's entry on one GPU, as a pipeline of steps (the machinery of each
is in entry/): let host-side calls finish -> close the gate -> quiesce ->
drain -> freeze -> pin; then, with the cross-GPU lock given up (gpu_sets.py),
settle and read the certificate's witnesses at the grant.

Each step is timed into the entry's stats by the one runner, and each that
takes something names what gives it back. When a step fails, the runner
gives back what the steps so far took, in reverse (thaw, release the
drain's locks, reopen the gate: a process is thawed before the driver's lock
on it is released), so a refused entry leaves nobody frozen, locked or shut
out. Runs in the GPU's worker thread (gpu_regions.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.regions.certificate import Certifier
from krex_runtime.regions.entry import cpu_slices
from krex_runtime.regions.entry.cpu_slices import CpuPlan
from krex_runtime.regions.entry.hints import told
from krex_runtime.regions.entry.hold_processes import HeldBack
from krex_runtime.regions.entry.late_freeze import LateFreeze, Pending, split_freeze
from krex_runtime.regions.entry.quiesce import Quiesced, deferred, describe, quiesce
from krex_runtime.regions.entry.settle import ClockProbe, settle
from krex_runtime.regions.freezer import FreezeError, Freezer, Target, is_stopped
from krex_runtime.regions.gate.backends import DrainReport, GateBackend
from krex_runtime.regions.gate.core import Gate, ProcEntry
from krex_runtime.regions.gate.header_layout import HOST_SIDE_CLASSES, HOST_SIDE_MASK
from krex_runtime.regions.gpu_sets import NO_SHARED, SharedEntry, SharedHolds
from krex_runtime.regions.region_settings import RegionSettings
from krex_runtime.regions.region_stats import EntryStats
from krex_runtime.regions.requests import Entry, RegionRefused, Request


class EntrySite(Protocol):
    """One GPU's region machinery, as an entry uses it (gpu_regions.GpuRegions)."""

    gpu: int
    gate: Gate
    backend: GateBackend
    freezer: Freezer
    cpus: CpuPlan
    settings: RegionSettings
    tenants: TenantRegistry
    clock_probe: ClockProbe
    certifier: Certifier | None
    shared: SharedHolds | None

    def let_go(self, targets: list[Target]) -> list[Target]: ...

    def others_calls(self, holder: int) -> int: ...


@dataclass(eq=False)
class Entering:
    """One entry in progress: what its steps read, and what they took so far."""

    site: EntrySite
    req: Request
    stats: EntryStats
    held: HeldBack  # tenants frozen because the gate cannot hold them (entry/hold_processes.py, entry/hints.py)
    sharers: list[tuple[int, str]] = field(default_factory=list)  # the GPU's other tenants: (tenant id, command id)
    shared: SharedEntry = NO_SHARED  # those of them placed on several GPUs (gpu_sets.py)
    quiet: Quiesced | None = None
    no_context: frozenset[int] = frozenset()  # pids the GPU knows no context of (entry/hints.py)
    overdue: frozenset[int] = frozenset()  # tenants still claiming a call in flight at the quiesce bound
    report: DrainReport = field(default_factory=DrainReport)
    left_running: list[ProcEntry] = field(default_factory=list)  # still inside a host-side call
    targets: list[Target] = field(default_factory=list)
    frozen: list[int] = field(default_factory=list)
    late: Pending = field(default_factory=dict)  # frozen once out of their calls (entry/late_freeze.py)
    pinned: bool = False

    @property
    def holder(self) -> int:
        return self.req.tenant_id  # OPERATOR for an operator's lease: nobody passes

    @property
    def skip(self) -> frozenset[int]:
        """Tenants another GPU's region froze: this entry leaves them to it (gpu_sets.py)."""
        return self.shared.skip


@dataclass(frozen=True)
class Step:
    """One step of the entry: what it takes, the EntryStats field its time goes
    to (None: it records its own), and what gives back what it took."""

    take: Callable[[Entering], None]
    timed_as: str | None = None
    give_back: Callable[[Entering], None] | None = None


def enter(site: EntrySite, req: Request, gap_s: float) -> Entry:
    """`gap_s`: how long the gate stayed open before it for the work the last region held back."""
    started = time.monotonic()
    stats = EntryStats(wait_s=started - req.requested_at, gap_s=gap_s)
    # Tenants frozen because the gate cannot hold them: a process of theirs on
    # the GPU without the library (entry/hold_processes.py), a claim of a call in
    # flight past the quiesce bound (entry/hints.py).
    held = HeldBack(site.freezer, site.tenants, req.tenant_id, {req.tenant_id})
    e = Entering(site, req, stats, held)
    try:
        take_all(e, STEPS, started)
    finally:
        if site.shared is not None:
            site.shared.leave(e.shared)
    return _granted(e, started)


def take_all(e: Entering, steps: Sequence[Step], started: float) -> None:
    """Run `steps` in order, each timed from the end of the one before; when
    one fails, give back what every step begun took, the last first."""
    begun: list[Step] = []
    last = started
    try:
        for step in steps:
            begun.append(step)
            step.take(e)
            now = time.monotonic()
            if step.timed_as is not None:
                setattr(e.stats, step.timed_as, now - last)
            last = now
    except BaseException:
        for step in reversed(begun):
            if step.give_back is not None:
                step.give_back(e)
        raise


def _let_host_side_finish(e: Entering) -> None:
    """Before the gate closes: where another tenant is inside a context
    creation, a module load or a memory allocation or release (each
    touches the device, and slowed the trials of regions they overlapped:
    docs/BENCHMARKS.md), park every new
    such call and wait, bounded by `host_side_wait_s`, for those in
    progress; everyone's GPU work goes on meanwhile. Records the seconds
    waited and how many processes were still inside at the bound (their
    calls then overlap the region, which its certificate says)."""
    gate, bound = e.site.gate, e.site.settings.host_side_wait_s
    if bound <= 0:
        return

    def inside() -> list[ProcEntry]:  # a stopped process cannot finish its call: not waited for
        return [p for p in gate.inside_classes(e.holder, HOST_SIDE_CLASSES) if not is_stopped(p.pid)]

    if not inside():
        return
    t0 = time.monotonic()
    gate.close_classes(e.holder, HOST_SIDE_MASK)
    pause, left = 200e-6, inside()
    while left and time.monotonic() - t0 < bound:
        time.sleep(pause)
        pause = min(pause * 2, 5e-3)
        left = inside()
    e.stats.host_side_s, e.stats.host_side_left = time.monotonic() - t0, len(left)


def _close(e: Entering) -> None:
    e.site.gate.close_gate(e.holder)


def _open(e: Entering) -> None:
    e.site.gate.open_gate()


def _quiesce(e: Entering) -> None:
    site = e.site
    # Tenants placed on several GPUs: the entry steps that touch them run one GPU
    # at a time, and those another GPU's region froze are left to it (gpu_sets.py).
    e.sharers = [(t.tenant_id, t.command_id) for t in site.tenants.of_gpu(site.gpu) if t.tenant_id != e.holder]
    if site.shared is not None:
        e.shared = site.shared.enter(site.gpu, e.sharers)
    e.held.already |= e.skip
    # What entries say is checked against the GPU: a process it knows no
    # context of has nothing in flight there (entry/hints.py).
    others = site.gate.others(e.holder, e.skip)
    contexts = _contexts(site) if others else None
    e.no_context = frozenset(p.pid for p in others if contexts is not None and p.pid not in contexts)
    # A lease waits for every call: it freezes everyone and its entry is not in a hurry.
    every_call = site.settings.entry_waits_for == "all" or e.req.kind == "lease"
    e.quiet = quiesce(site.gate, e.holder, site.settings.quiesce_timeout_s, every_call=every_call, skip=e.skip,
                      no_context=e.no_context, contexts_known=contexts is not None)
    e.stats.inside_at_close, e.stats.waited_for = e.quiet.inside_at_close, e.quiet.waited_for


def _contexts(site: EntrySite) -> set[int] | None:
    """The pids with a context on this GPU, as the GPU says (None: it cannot)."""
    if site.certifier is None:
        return None
    try:
        return site.certifier.processes.contexts(site.gpu)
    except Exception:  # missing data is a value: every claim stands
        return None


def _drain(e: Entering) -> None:
    site, quiet = e.site, _quiesced(e)
    e.overdue = _hold_overdue(e, quiet.busy)
    # Inside a host-side call still (entry/quiesce.py): drained, held by the gate, not locked.
    # Tenants of several GPUs are drained by their library, never driver-locked (gpu_sets.py).
    by_library = {p.pid for p in quiet.deferred} | {
        p.pid for p in site.gate.others(e.holder, e.skip) if p.tenant_id in e.shared.shared}
    timeout_s = site.settings.drain_timeout_s
    e.report = site.backend.drain(site.gate, e.holder, timeout_s, by_library, e.skip | e.overdue, e.no_context)
    if e.report.stuck:
        raise RegionRefused(
            "ETIMEDOUT",
            f"tenants did not drain within {timeout_s:g} s: "
            + ", ".join(f"pid {p} ({r})" for p, r in e.report.stuck.items()),
        )


def _hold_overdue(e: Entering, busy: list[ProcEntry]) -> frozenset[int]:
    """Processes still claiming a call in flight at the quiesce bound: the
    bound is the operator's, so the claim delays the region no further; their
    tenants are frozen for the hold, not drained (entry/hints.py). One that
    cannot be frozen (no running command holds it) refuses the region, as before."""
    if not busy:
        return frozenset()
    bound_s = e.site.settings.quiesce_timeout_s
    stuck = [p for p in busy if not e.held.hold_tenant(p.tenant_id)]
    if stuck:
        raise RegionRefused(
            "ETIMEDOUT",
            f"tenants still inside a GPU call after {bound_s:g} s: " + ", ".join(f"pid {p.pid}" for p in stuck),
        )
    for p in busy:
        told(p.tenant_id, p.pid, f"still claimed a GPU call in flight at the {bound_s:g} s quiesce bound: "
                                 "tenant frozen for the region")
    return frozenset(p.tenant_id for p in busy)


def _give_back_drain(e: Entering) -> None:
    """Thaw the tenants held instead of drained, then release what the drain locked."""
    e.site.freezer.thaw(e.site.let_go(e.held.taken()[0]))
    e.site.backend.release(e.report)


def _freeze(e: Entering) -> None:
    site, quiet = e.site, _quiesced(e)
    frozen = sorted(e.overdue)
    # Still inside a host-side call: frozen once out of it, during the hold (entry/late_freeze.py).
    # Read after the drain: those whose calls returned meanwhile are frozen now.
    if quiet.deferred:  # none can join after the close
        e.left_running = deferred(site.gate, e.holder, e.skip | e.overdue, frozenset(quiet.unfounded))
    e.stats.deferred = describe(e.left_running)
    if site.settings.protection == "gpu+cpu" or e.req.kind == "lease":
        others = [t for t in site.tenants.of_gpu(site.gpu)
                  if t.tenant_id not in e.skip | e.overdue | {e.req.tenant_id}]
        e.targets, now, e.late = split_freeze(others, e.left_running)
        try:
            site.freezer.freeze(e.targets)
        except FreezeError as exc:
            raise RegionRefused("EAGAIN", f"could not freeze the other tenants: {exc}") from None
        frozen = frozen + now + sorted(e.skip)  # skip: frozen by another GPU's region, for this one's hold too
    e.held.already |= set(frozen) | set(e.late)
    # Whatever the protection: a tenant with a process on this GPU that its
    # gate cannot hold (no interception library; or a tenant of another GPU
    # using this one) is frozen, or nothing would stop it (entry/hold_processes.py).
    for who in site.certifier.ungated(e.holder) if site.certifier is not None else []:
        e.held.hold(who)
    extra, extra_ids = e.held.taken()
    e.targets, e.frozen = e.targets + extra, sorted(set(frozen + extra_ids), key=(frozen + extra_ids).index)
    e.held.clear()  # the entry thaws these with its own
    if site.shared is not None:
        site.shared.hold(site.gpu, e.shared, e.sharers, e.targets)


def _thaw(e: Entering) -> None:
    e.site.freezer.thaw(e.site.let_go(e.targets))


def _pin(e: Entering) -> None:
    if e.req.tid:  # under either protection (machinery.cpu_plan says why)
        e.pinned = cpu_slices.pin_thread(e.req.pid, e.req.tid, e.site.cpus.reserved_cores(e.site.gpu))


def _quiesced(e: Entering) -> Quiesced:
    assert e.quiet is not None, "the quiesce step comes first"
    return e.quiet


STEPS = (
    Step(_let_host_side_finish),
    Step(_close, "close_s", _open),
    Step(_quiesce, "quiesce_s"),
    Step(_drain, "drain_s", _give_back_drain),
    Step(_freeze, "freeze_s", _thaw),
    Step(_pin, "pin_s"),
)


def _granted(e: Entering, started: float) -> Entry:
    """Settle, then the grant's figures and witnesses: the entry's last steps,
    after the cross-GPU lock is given up (nothing they do touches another tenant)."""
    site, req, stats, quiet = e.site, e.req, e.stats, _quiesced(e)
    settle_s = 0.0  # a lease measures nothing
    if req.kind == "region":
        settle_s = site.settings.settle_max_s if req.settle_s is None else req.settle_s  # its own bound first
    clock = settle(site.clock_probe, site.gpu, settle_s, site.settings.settle_poll_s)
    stats.take_clock(clock)
    stats.settle_max_s = settle_s
    stats.enter_s = time.monotonic() - started
    # Calls the other tenants have made so far, per the interception counters:
    # the same figure at release proves none of them submitted meanwhile.
    stats.others_calls = site.others_calls(e.holder)
    # CLOCK_MONOTONIC, as the simulator's execution log and the gate use.
    stats.granted_mono_ns = time.monotonic_ns()
    bound_s = site.settings.quiesce_timeout_s
    overdue = [f"tenant {p.tenant_id} (pid {p.pid}) still claimed a GPU call in flight at the "
               f"{bound_s:g} s quiesce bound: frozen, its work in flight not drained" for p in quiet.busy]
    witness = None if site.certifier is None else site.certifier.start(
        e.holder, req.pid, clock, req.tid, e.left_running, e.held.hold,
        lies=list(quiet.unfounded.values()), overdue=overdue, frozen=frozenset(e.frozen))
    late = LateFreeze(site.gate, site.freezer, e.late) if e.late else None
    return Entry(e.targets, e.frozen, e.report, e.pinned, stats, witness, late, e.held)
