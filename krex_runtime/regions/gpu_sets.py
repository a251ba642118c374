"""Regions over a set of GPUs: a command placed on several GPUs (`--gpus 2`,
`--gpus 0,1`) asks one region that covers them all, through the same
`region()` / `krex_region_enter()` as on one GPU; the set is its placement.

`RegionSet` is that request as the channel holds it: one region id, one
GRANTED, one release, one verdict. Under it, a sub-request per GPU (a plain
`Request` with the set's id) is served by that GPU's own queue
(gpu_regions.py), so each GPU keeps its FIFO, fair share and entry steps.

No deadlock: the sub-requests are made one at a time in ascending GPU index,
the next only once the one before is granted, and the lower ones are held
meanwhile. Every set acquires in that one total order and a single-GPU
region never waits while it holds, so no cycle of waiters can form; each
GPU's queue moves (FIFO, fair share, a hold limit on every holder), so the
set is served. Its hold limit starts at its first GPU's grant: a GPU held
while the next is awaited keeps that GPU's other tenants out as a hold
does, so no GPU is held for a set past the limit; a set that has not had
every GPU by then is refused (ETIMEDOUT) and gives back what it took (its
sub-requests have no limit of their own). The holder hears GRANTED only
once every GPU is held; a refusal or withdrawal on the way gives back what
was taken. Everything is released
together: by the holder, by the hold limit, by a withdrawal, by the
holder's death or the runtime's shutdown.

The certificate covers every GPU: each GPU's exit certifies that GPU, and the
set's verdict is the worst of them (violated > unknown > perturbed > verified) with the
reasons prefixed by their GPU.

`SharedHolds` keeps the books of tenants placed on several GPUs: a region
on one of their GPUs may find them already drained and frozen by a region
on another (its drain would never be acknowledged: they are frozen), so it
takes a share of that hold instead, and the last region to let go thaws
them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from krex_runtime.regions.certificate import RANK, UNKNOWN
from krex_runtime.regions.freezer import Target
from krex_runtime.regions.requests import RegionRefused, Request

log = logging.getLogger("krex.regions")



def combine_verdicts(parts: list[tuple[int, tuple[str, list[str]]]]) -> tuple[str, list[str]]:
    """The set's verdict from each GPU's (gpu, (verdict, reasons)): the worst
    wins; every reason is kept, prefixed by its GPU."""
    if not parts:
        return "unknown", ["no GPU of the set was granted"]
    worst = max((v for _, (v, _) in parts), key=lambda v: RANK.get(v, RANK[UNKNOWN]))
    reasons = [f"GPU {gpu}: {r}" for gpu, (_, rs) in parts for r in rs]
    return worst, reasons


class RegionSet:
    """A region over several GPUs, as the channel and the manager see a
    `Request` (the same attributes it reads: seq, kind, granted, released,
    flags, revoked, reason, exit_clock, integrity, certified, verdict)."""

    kind = "region"

    def __init__(
        self,
        seq: int,
        gpus: tuple[int, ...],
        tenant_id: int,
        command_id: str,
        pid: int,
        tid: int,
        limit_s: float | None,
        share: str,
        settle_s: float | None,
    ) -> None:
        if len(gpus) < 2 or list(gpus) != sorted(set(gpus)):
            raise ValueError(f"a region set is two or more distinct GPUs in ascending order, not {gpus}")
        self.seq, self.gpus = seq, gpus
        self.tenant_id, self.command_id, self.pid, self.tid = tenant_id, command_id, pid, tid
        self.limit_s, self.share, self.settle_s = limit_s, share, settle_s
        self.gpu = gpus[0]
        self.parts: list[Request] = []  # the sub-requests made so far, in GPU order
        self.granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.released = asyncio.Event()
        self.certified = asyncio.Event()
        self.withdrawn = False
        self.revoked = False
        self.reason = ""
        self.flags: list[str] = []
        self.exit_clock: dict[str, Any] | None = None
        self.verdict: tuple[str, list[str]] = ("unknown", ["not released yet"])
        self._integrity: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def integrity(self) -> dict[str, Any] | None:
        return self._integrity

    @integrity.setter
    def integrity(self, record: dict[str, Any] | None) -> None:
        # What the holder's library saw of its timed windows goes into every GPU's release.
        self._integrity = record
        for part in self.parts:
            part.integrity = record


class GpuQueue(Protocol):
    """What a set needs of one GPU's queue (gpu_regions.GpuRegions, which imports this module)."""

    holder: Request | None

    def submit(self, req: Request) -> None: ...

    def release(self, req: Request, reason: str = "released") -> None: ...

    def withdraw(self, req: Request, reason: str) -> None: ...


class RegionSets:
    """Serves region sets over the GPUs' queues (the manager's part for sets)."""

    def __init__(self, gpus: Mapping[int, GpuQueue], hold_limit_action: Callable[[], str],
                 end_command: Callable[[str, str], None]) -> None:
        self._gpus = gpus
        self._on_hold_limit = hold_limit_action  # "revoke" | "kill" (regions.on_hold_limit)
        self._end_command = end_command
        self._active: set[RegionSet] = set()

    def submit(self, rs: RegionSet) -> None:
        unknown = [g for g in rs.gpus if g not in self._gpus]
        if unknown:
            raise ValueError(f"this node has no GPU {unknown[0]}")
        self._active.add(rs)
        rs._task = asyncio.create_task(self._serve(rs), name=f"region-set-{rs.seq}")
        rs._task.add_done_callback(lambda _: self._active.discard(rs))

    def release(self, rs: RegionSet, reason: str = "released") -> None:
        """The holder is done: every GPU is given back (a set not yet granted is left as it is)."""
        if not rs.granted.done() or rs.released.is_set() or rs.granted.exception() is not None:
            return
        rs.reason = reason
        self._release_parts(rs, reason)
        # The clock each GPU ended at, before the holder hears RELEASED (it carries the flags).
        flags: list[str] = []
        for part in rs.parts:
            for flag in (part.exit_clock or {}).get("flags") or []:
                if flag not in flags:
                    flags.append(flag)
        rs.exit_clock = {"flags": flags}
        rs.released.set()

    def withdraw(self, rs: RegionSet, reason: str) -> None:
        """The requester went away or gave up: what is queued leaves its queue, what is held is released."""
        if rs.withdrawn or rs.released.is_set():
            return
        rs.withdrawn, rs.reason = True, reason
        for part in rs.parts:
            self._gpus[part.gpu].withdraw(part, reason)
        rs.released.set()

    # --- serving -------------------------------------------------------------------------

    async def _serve(self, rs: RegionSet) -> None:
        try:
            deadline = await self._acquire(rs)
        except RegionRefused as exc:
            self._give_back(rs, exc)
            return
        except Exception:
            log.exception("region set %d failed; giving back its GPUs", rs.seq)
            self._give_back(rs, RegionRefused("EIO", "runtime error while serving the region set"))
            return
        rs.flags = [f for part in rs.parts for f in part.flags if f]  # each GPU's clock at the grant
        rs.flags = list(dict.fromkeys(rs.flags))
        if not rs.withdrawn:
            rs.granted.set_result(None)
        try:
            left = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
            await asyncio.wait_for(rs.released.wait(), timeout=left)
        except TimeoutError:
            self._overrun(rs)
        await self._certify(rs)

    async def _acquire(self, rs: RegionSet) -> float | None:
        """Each GPU in ascending order, the next only once the one before is held.
        The hold limit runs from the first GPU's grant: a GPU held while the
        next is awaited is held from the others of its GPU all the same (an
        operator's lease on the next one once kept GPU 0 for 22 s under a 5 s
        limit). Past the limit, short of a GPU, the set is refused. Returns the
        limit's deadline (loop time; None: no limit)."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        for index in rs.gpus:
            if rs.withdrawn:
                raise RegionRefused("ECANCELED", rs.reason or "withdrawn")
            first = not rs.parts
            part = Request(
                rs.seq, index, "region", rs.tenant_id, rs.command_id, rs.pid,
                rs.tid if first else 0,  # the measuring thread is pinned once, to the first GPU's reserved cores
                None,  # the set's hold limit runs once all are held (RegionSets._serve)
                share=rs.share, settle_s=rs.settle_s, gpus=rs.gpus,
            )
            rs.parts.append(part)
            self._gpus[index].submit(part)
            gone = asyncio.create_task(part.released.wait())  # withdrawn during its entry: never granted
            try:
                left = None if deadline is None else max(0.0, deadline - loop.time())
                waiting: set[asyncio.Future[Any]] = {part.granted, gone}
                await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
            if part.granted.done():
                part.granted.result()  # a refusal raises RegionRefused
            elif deadline is not None and loop.time() >= deadline and not rs.withdrawn:
                held = ",".join(str(p.gpu) for p in rs.parts[:-1])
                raise RegionRefused("ETIMEDOUT", f"GPU {index} was not had within the {rs.limit_s:g} s hold limit "
                                    f"while GPU {held} was held for the set")
            if not part.granted.done() or rs.withdrawn:
                raise RegionRefused("ECANCELED", rs.reason or "withdrawn")
            if first and rs.limit_s is not None:
                deadline = loop.time() + rs.limit_s
        return deadline

    def _give_back(self, rs: RegionSet, exc: RegionRefused) -> None:
        """Not granted: what was taken goes back, and the requester hears why."""
        self._release_parts(rs, rs.reason or f"region set refused: {exc.reason}")
        rs.released.set()
        if not rs.granted.done():
            rs.granted.set_exception(exc)
            rs.granted.exception()  # retrieved: nobody may be awaiting it
        rs.certified.set()

    def _release_parts(self, rs: RegionSet, reason: str) -> None:
        for part in rs.parts:
            regions = self._gpus[part.gpu]
            if regions.holder is part:
                regions.release(part, reason)
            else:
                regions.withdraw(part, reason)

    def _overrun(self, rs: RegionSet) -> None:
        if self._on_hold_limit() == "kill":
            rs.reason = f"held past the {rs.limit_s:g} s limit: command killed"
            self._end_command(rs.command_id, rs.reason)
        else:
            rs.reason = f"held past the {rs.limit_s:g} s limit: region revoked"
        rs.revoked = True
        log.warning("region set %d on GPUs %s (tenant %d): %s", rs.seq, rs.gpus, rs.tenant_id, rs.reason)
        self._release_parts(rs, rs.reason)
        rs.released.set()

    async def _certify(self, rs: RegionSet) -> None:
        """Every GPU's certificate, combined, once each GPU's exit has made its own."""
        try:
            granted = [p for p in rs.parts if p.entry is not None]  # a refused one is owed no certificate
            await asyncio.gather(*(p.certified.wait() for p in granted))
            rs.verdict = combine_verdicts([(p.gpu, p.verdict) for p in granted])
        finally:
            rs.certified.set()

    async def shutdown(self) -> None:
        """Withdraw every set (what it holds is released, what it awaits leaves its
        queue) and wait for their tasks, before the GPUs' own shutdown."""
        tasks = [rs._task for rs in self._active if rs._task is not None]
        for rs in list(self._active):
            self.withdraw(rs, "runtime shutting down")
        if tasks:
            await asyncio.wait(tasks, timeout=30.0)


@dataclass
class _Held:
    holders: set[int] = field(default_factory=set)  # the GPUs whose regions hold it back now
    target: Target | None = None  # its freeze, as the first region that froze it made it (None: not frozen)


@dataclass(frozen=True)
class SharedEntry:
    """What an entry does about tenants placed on several GPUs."""

    locked: bool  # it holds the books' lock until its freeze is done
    skip: frozenset[int]  # tenant ids another GPU's region holds drained (and frozen): not waited for again
    shared: frozenset[int]  # tenant ids placed on several GPUs among its others


NO_SHARED = SharedEntry(False, frozenset(), frozenset())


class SharedHolds:
    """The books of tenants placed on several GPUs, shared by those GPUs' regions.

    A region's entry drains (and, under gpu+cpu, freezes) such a tenant as
    any other, then notes it held. A region of another of its GPUs that
    enters meanwhile finds it held: the tenant has had no work in flight since
    that drain and cannot submit (the first region's gate is still closed to
    it, and this one's gate was closed before it looked), so the entry does
    not wait for it, drain it or freeze it again (its drain would never be
    acknowledged while it is frozen), and holds it too. The last region to let
    go thaws it. The entry steps that touch such tenants run one GPU at a
    time (`enter` .. `leave`), so no region drains a tenant while another
    freezes it. They are drained by their library, never driver-locked (a
    lock taken for one GPU's region would be dropped at its exit while
    another GPU's region keeps the tenant frozen, and unlocking a stopped
    process hangs).
    """

    def __init__(self, placement: Callable[[str], int]) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}  # command id -> who holds it
        self._gpus_of = placement  # command id -> how many GPUs it is placed on

    def enter(self, gpu: int, others: list[tuple[int, str]]) -> SharedEntry:
        """Before an entry's quiesce, with its gate closed; `others`: the GPU's other
        tenants as (tenant id, command id)."""
        shared = frozenset(t for t, c in others if self._gpus_of(c) > 1)
        if not shared:
            return NO_SHARED
        self._lock.acquire()
        skip = frozenset(t for t, c in others if c in self._held and self._held[c].holders - {gpu})
        return SharedEntry(True, skip, shared)

    def hold(self, gpu: int, entry: SharedEntry, others: list[tuple[int, str]], frozen: list[Target]) -> None:
        """The entry drained (or found held) its shared tenants and froze `frozen`."""
        if not entry.locked:
            return
        for tenant_id, command_id in others:
            if tenant_id in entry.shared:
                self._held.setdefault(command_id, _Held()).holders.add(gpu)
        for target in frozen:
            held = self._held.get(target.command_id)
            if held is not None and held.target is None:
                held.target = target

    def leave(self, entry: SharedEntry) -> None:
        if entry.locked:
            self._lock.release()

    def let_go(self, gpu: int, targets: list[Target]) -> list[Target]:
        """At a region's exit (or a failed entry): of `targets` (what it froze),
        those to thaw now, and the freezes of shared tenants it was the last to
        hold. One another GPU's region still holds stays frozen."""
        with self._lock:
            thaw = [t for t in targets if t.command_id not in self._held]
            for command_id, held in list(self._held.items()):
                if gpu not in held.holders:
                    continue
                held.holders.discard(gpu)
                if not held.holders:
                    del self._held[command_id]
                    if held.target is not None:
                        thaw.append(held.target)
            return thaw
