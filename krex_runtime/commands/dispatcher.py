"""Admission: a FIFO queue, per-GPU slots, GPU choice, and the life of each command.

Order is FIFO per GPU within a share key, and weighted fair share across
submitters, then across each submitter's keys (fair_share.py: start-time
fair queueing, a submitter's turn comes within one start of every other
submitter's, a key's within one of its submitter's other keys'; a fresh key
per command gains its submitter nothing): a command pinned to a busy GPU holds back later commands for that GPU
only; a command that may go anywhere takes the least-loaded GPU
with a free slot, and when none is free it holds back everything behind it.
The policy sets the slots: `command` allows one command per GPU (the
exclusive baseline), `ungated` and `krex` allow `slots_per_gpu`.

A pooled, forked or forwarded command also waits for a worker of the node's
pools (pools.py: an idle context process or context server, a ready zygote),
whose readiness their one event signals; it never waits longer than its own
time limit: still queued when the limit runs out, it ends as `timeout` with
a reason that says what it waited for.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from krex_runtime.commands import auto_regions, gpu_placement, tenant_reports, unprotected
from krex_runtime.commands.command_history import CommandHistory
from krex_runtime.commands.environment import AdmitError, TenantSetup
from krex_runtime.commands.evaluation_result import evaluation_of
from krex_runtime.commands.forwarded.forwarded_pool import ForwardedWorker
from krex_runtime.commands.job import Job, check_spawnable
from krex_runtime.commands.launch import Outcome
from krex_runtime.commands.launchers import Launchers
from krex_runtime.commands.pooled.pooled_worker import PooledWorker
from krex_runtime.commands.pools import NodePools
from krex_runtime.commands.seams import CERTIFICATE_WAIT_S, CommandLeases, CommandWatcher, RegionCertificates
from krex_runtime.host import fair_share
from krex_runtime.host.identities import Identity
from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.node.config import Config
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.tenant.pooled_entry import EntryError, parse_entry
from krex_runtime.wire.protocol.bodies import SubmitBody
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError
from krex_runtime.wire.state import events
from krex_runtime.wire.state.command_states import ended_state

log = logging.getLogger("krex.dispatcher")


class Dispatcher:
    def __init__(
        self,
        config: Config,
        gpus: list[Gpu],
        sink: EventSink,
        setup: TenantSetup,
        tenants: TenantRegistry,
        watcher: CommandWatcher,
        output_dir: Path,
        pools: NodePools,
        leases: CommandLeases | None = None,
        certificates: RegionCertificates | None = None,
    ) -> None:
        self.config = config
        self.gpus = {g.index: g for g in gpus}
        self.slots = config.effective_slots_per_gpu
        self.queue: deque[Job] = deque()
        self._history = CommandHistory(config.dispatcher.keep_finished)
        self.jobs = self._history.jobs  # queued, running and the finished kept (command_history.py)
        self.paused_node = False
        self.paused_gpus: set[int] = set()
        self.closed = False
        self._queue_deadlines: dict[str, asyncio.TimerHandle] = {}  # pooled and forked commands still queued
        self._emit = sink.emit
        self._setup = setup
        self._tenants = tenants
        self._watcher = watcher
        self._output_dir = output_dir
        # What tenants report about their commands, read as they write it (an earlier run's cleared).
        self.reports = tenant_reports.Reports(setup.env.run_dir, setup.run_as)
        self._leases = leases
        self._certificates = certificates
        self.leased_gpus: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._nonce = secrets.token_hex(2)
        self._ids = itertools.count(1)
        self.fair = fair_share.AdmissionOrder(config.dispatcher.share_weights)  # across submitters, then their keys
        self._pools = pools  # their workers serve pooled, forked, forwarded commands (follow_pools hears a ready one)
        self._launch = Launchers(config, setup, watcher.output, sink.emit, pools)

    # --- requests ---------------------------------------------------------

    def submit(self, body: SubmitBody) -> Job:
        if self.closed:
            raise ProtocolError(ErrorCode.REFUSED, "the runtime is shutting down and admits no new command")
        if not body.argv or not body.argv[0]:
            raise ProtocolError(ErrorCode.BAD_REQUEST, "argv must name a program")
        check_spawnable(body)
        self.check_gpu(body.gpu)
        gpu = gpu_placement.one_gpu(body)  # `gpus: [1]` is GPU 1, as `gpu: 1` is
        if body.timeout_s is not None and body.timeout_s <= 0:
            raise ProtocolError(ErrorCode.BAD_REQUEST, "timeout_s must be positive")
        if body.lease and self._leases is None:
            raise ProtocolError(ErrorCode.REFUSED, "leases need policy 'krex'")
        # A set of GPUs runs in process mode (gpu_placement.py): its default too.
        mode = body.mode or ("process" if gpu_placement.set_size(body) > 1 else self._pools.default_mode(body.argv))
        ask = gpu_placement.ask_of(body, {i: g.vendor for i, g in self.gpus.items()}, mode)  # a set of GPUs, or None
        entry = None
        refused = self._pools.refusal(mode, gpu)
        if refused:
            raise ProtocolError(ErrorCode.REFUSED, refused)
        if mode in ("pooled", "forked"):
            try:
                entry = parse_entry(list(body.argv)).to_dict()
            except EntryError as exc:
                raise ProtocolError(ErrorCode.BAD_REQUEST, str(exc).replace("pooled", mode)) from None
        auto_regions.check(body)
        if len(self.queue) >= self.config.dispatcher.max_queued:
            raise ProtocolError(ErrorCode.QUEUE_FULL, f"admission queue is full ({len(self.queue)} commands)")
        job = Job(
            id=f"{self._nonce}-{next(self._ids)}",
            argv=list(body.argv),
            gpu_request=gpu,
            timeout_s=body.timeout_s or self.config.dispatcher.default_timeout_s,
            cwd=body.cwd,
            env=dict(body.env),
            label=body.label,
            submitted_at=time.time(),
            lease=body.lease,
            mode=mode,
            entry=entry,
            share=body.share or fair_share.DEFAULT_KEY,
            gpu_ask=ask,
        )
        auto_regions.setup(job, body, self.config.regions, self.reports)
        if self.config.runtime.policy == "krex":
            unprotected.setup(job, self.reports)
        self.jobs[job.id] = job
        self.queue.append(job)
        self._emit(
            events.CommandQueued(
                id=job.id, argv=job.argv, gpu=job.gpu_request, timeout_s=job.timeout_s, label=job.label,
                lease=job.lease, mode=job.mode, share=job.share,
                gpus=list(ask.indices) or None if ask else None, gpu_count=ask.count if ask else None,
            )
        )
        if mode in ("pooled", "forked", "forwarded"):
            loop = asyncio.get_running_loop()
            self._queue_deadlines[job.id] = loop.call_later(job.timeout_s, self._queued_too_long, job)
        self.pump()
        return job

    def find(self, command_id: str) -> Job:
        return self._history.find(command_id)

    def remember(self, past: list[Job]) -> None:
        """Commands earlier runs ended (finished_record.py), oldest first, put
        in the history before this run's: `wait` and `cancel` find them, and
        they leave it (their output files with them) as any finished command."""
        self._history.remember(past)
        while any(i.startswith(f"{self._nonce}-") for i in self.jobs):  # this run's ids never name an earlier one
            self._nonce = secrets.token_hex(2)

    def cancel(self, command_id: str, reason: str = "cancelled by request") -> Job:
        job = self.find(command_id)
        if job.state == "queued":
            self.queue.remove(job)
            self._finish(job, Outcome("cancelled", None, None, reason), "cancelled")
        elif job.state == "running" and not job.ending:
            job.cancel(reason)
        return job

    def pause(self, gpu: int | None) -> None:
        self.check_gpu(gpu)
        if gpu is None:
            self.paused_node = True
        else:
            self.paused_gpus.add(gpu)
        self._emit(events.AdmissionPaused(gpu=gpu))

    def resume(self, gpu: int | None) -> None:
        self.check_gpu(gpu)
        if gpu is None:
            self.paused_node = False
        else:
            self.paused_gpus.discard(gpu)
        self._emit(events.AdmissionResumed(gpu=gpu))
        self.pump()

    def check_gpu(self, gpu: int | None) -> None:
        """A bad_request unless this node has `gpu` (None: any GPU)."""
        if gpu is not None and gpu not in self.gpus:
            known = ", ".join(str(i) for i in sorted(self.gpus))
            raise ProtocolError(ErrorCode.BAD_REQUEST, f"this node has no GPU {gpu} (it has: {known})")

    # --- placement ----------------------------------------------------------

    def pump(self) -> None:
        """Start every queued command that may start now, in FIFO order."""
        if self.closed or self.paused_node:
            return
        blocked: set[int] = self.paused_gpus | self.leased_gpus
        for job, turn in self.fair.order(list(self.queue), lambda j: j.share):
            if len(blocked) == len(self.gpus):
                break
            if job.mode == "forked" and self._refuse_forked(job):
                continue
            if job.gpu_ask is not None:  # a set of GPUs (gpu_placement.py)
                free = [i for i in self.gpus if i not in blocked and self._free(i, job)]
                chosen = gpu_placement.place(job.gpu_ask, free, self._load, lambda i: self.gpus[i].vendor)
                if chosen is None:
                    if not job.gpu_ask.indices:
                        break  # as a command that may go anywhere: it holds back what is behind it
                    blocked.update(job.gpu_ask.indices)  # its GPUs serve it first
                    continue
                self.queue.remove(job)
                self.fair.started(job.share, turn)
                self._start(job, chosen[0], chosen)
                continue
            if job.gpu_request is not None:
                its_gpu_free = job.gpu_request not in blocked and self._free(job.gpu_request, job)
                gpu = job.gpu_request if its_gpu_free else None
                if gpu is None:
                    blocked.add(job.gpu_request)
                    continue
            else:
                candidates = [i for i in self.gpus if i not in blocked and self._free(i, job)]
                if not candidates:
                    break
                gpu = min(candidates, key=lambda i: (self._load(i), i))
            self.queue.remove(job)
            self.fair.started(job.share, turn)
            self._start(job, gpu)

    def _free(self, gpu: int, job: Job) -> bool:
        """A slot, and for a pooled command a ready context process: it never waits
        for one to be created while another is idle elsewhere."""
        return self._load(gpu) < self.slots and self._pools.has_ready(job.mode, gpu)

    def _queued_too_long(self, job: Job) -> None:
        """A pooled or forked command still queued at its time limit ends, never outliving it."""
        self._queue_deadlines.pop(job.id, None)
        if job.state != "queued" or job not in self.queue:
            return  # started, cancelled or refused meanwhile
        self.queue.remove(job)
        reason = f"still queued when its {job.timeout_s:g} s limit ran out ({self._waiting_for(job)})"
        self._finish(job, Outcome("timeout", None, None, reason), "timeout", started=False)

    def _waiting_for(self, job: Job) -> str:
        gpus = [job.gpu_request] if job.gpu_request is not None else sorted(self.gpus)
        where = f"GPU {gpus[0]}" if len(gpus) == 1 else "any GPU"
        if self.paused_node or all(g in self.paused_gpus | self.leased_gpus for g in gpus):
            return f"admission paused or leased on {where}"
        if all(self._load(g) >= self.slots for g in gpus):
            return f"no free slot on {where}"
        return self._pools.awaited(job.mode, where)

    def _refuse_forked(self, job: Job) -> bool:
        """A queued forked command whose zygote refused to serve fails with its reason
        (only a change of configuration can make that zygote serve)."""
        why = self._pools.refusal(job.mode, job.gpu_request)
        if not why:
            return False
        self.queue.remove(job)
        self._finish(job, Outcome("failed", None, None, why), "failed", started=False)
        return True

    def _load(self, gpu: int) -> int:
        return self._tenants.load(gpu)

    def start_internal(self, argv: list[str], gpu: int, label: str) -> Job:
        """A tenant the runtime runs for itself: no queue, no slot, but a tenant
        like any other for gates, regions and freezing."""
        job = Job(
            id=f"{self._nonce}-{label}{next(self._ids)}",
            argv=argv,
            gpu_request=gpu,
            timeout_s=10 * 365 * 86400.0,
            cwd="",
            env={},
            label=label,
            submitted_at=time.time(),
            internal=True,
        )
        self.jobs[job.id] = job
        self._emit(events.CommandQueued(id=job.id, argv=argv, gpu=gpu, timeout_s=None, label=label, lease=False,
                                        mode=None, share=None, gpus=None, gpu_count=None))
        self._start(job, gpu)
        return job

    def _start(self, job: Job, gpu_index: int, gpu_set: tuple[int, ...] = ()) -> None:
        deadline = self._queue_deadlines.pop(job.id, None)
        if deadline is not None:
            deadline.cancel()
        gpu = self.gpus[gpu_index]
        job.state, job.gpu = "running", gpu_index
        job.gpu_set = tuple(self.gpus[i] for i in gpu_set)
        worker = None
        server: ForwardedWorker | None = None
        if job.mode == "forwarded":
            assert self._pools.forwarded is not None
            server = self._pools.forwarded.take(gpu_index, job.id)
        if job.mode == "pooled":
            assert self._pools.pooled is not None
            worker = self._pools.pooled.take(gpu_index, job.id)
            # The context process's tenant id: its interception library and
            # gate slot were set up under it.
            job.tenant_id, job.worker, job.identity = worker.tenant_id, worker.id, worker.identity
            self._open_reports(job, worker.identity)
        else:
            job.tenant_id = self._setup.new_tenant_id()
        job.stdout_path = self._output_dir / f"{job.id}.stdout"
        job.stderr_path = self._output_dir / f"{job.id}.stderr"
        for index in gpu_set or (gpu_index,):  # a set's command is a tenant of each of its GPUs
            self._tenants.add(index, job)
        task = asyncio.create_task(self._run(job, gpu, worker, server))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(
        self, job: Job, gpu: Gpu, worker: PooledWorker | None = None, server: ForwardedWorker | None = None
    ) -> None:
        release_lease: Callable[[], None] | None = None
        if job.lease:
            assert self._leases is not None
            self.leased_gpus.add(gpu.index)
            try:
                release_lease = await self._leases.for_command(job)
            except Exception as exc:
                self.leased_gpus.discard(gpu.index)
                self._finish(job, Outcome("failed", None, None, f"lease refused: {exc}"), "failed", started=False)
                return
        admitted = False
        more = tuple(g.index for g in job.gpu_set[1:])  # the rest of its set of GPUs
        try:
            if worker is None:
                assert job.tenant_id is not None
                try:
                    job.identity = self._setup.admit(gpu.index, job.tenant_id, more)
                except AdmitError as exc:
                    self._finish(job, Outcome("failed", None, None, f"cannot start: {exc}"), "failed", started=False)
                    return
                admitted = True
                self._open_reports(job, job.identity)
            ended = await self._launch.run(job, gpu, worker, server)
            self._finish(job, ended.outcome, ended.outcome.state, started=ended.started)
        finally:
            if admitted:  # its processes have ended: its uid and gate entries go back
                self._setup.dismiss(gpu.index, job.tenant_id, job.identity, more)  # type: ignore[arg-type]
            if release_lease is not None:
                release_lease()
                self.leased_gpus.discard(gpu.index)
                self.pump()

    def _open_reports(self, job: Job, identity: Identity | None) -> None:
        """As it starts: the command's reports, for its uid's group to write."""
        self.reports.open([job.auto_region_report, job.unprotected_path], identity, keep=job.auto_region_report,
                          tally=(job.unprotected_path, unprotected.UNTRACKED))

    def _finish(self, job: Job, outcome: Outcome, state: str, started: bool = True) -> None:
        """The command has ended. Its result waits for the certificate of a
        region it released just before (a pooled command ends within
        microseconds of its release, before the release's steps have made
        the verdict): every region in a result carries its verdict."""
        if job.ending:
            return  # ended once already
        job.ending = True
        pending = self._certificates.uncertified(job.id) if self._certificates is not None else []
        if not pending:
            self._finished_now(job, outcome, state)
            return
        task = asyncio.create_task(self._finish_certified(job, outcome, state, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish_certified(self, job: Job, outcome: Outcome, state: str, pending: list[asyncio.Event]) -> None:
        await asyncio.wait([asyncio.create_task(e.wait()) for e in pending], timeout=CERTIFICATE_WAIT_S)
        self._finished_now(job, outcome, state)

    def _finished_now(self, job: Job, outcome: Outcome, state: str) -> None:
        state = ended_state(state, outcome.exit_code, outcome.signal)  # `finished` is exit status 0
        job.outcome, job.state, job.finished_at = outcome, state, time.time()
        # Read to their end, and gone: nothing a tenant wrote stays in the run folder.
        job.auto_regions = auto_regions.wrapped(self.reports.close(job.auto_region_report))
        unprotected.counted(job, self.reports.close(job.unprotected_path))
        job.evaluation = evaluation_of(job.stdout_path, job.output_loss.stdout)  # the harness's last line, if any
        if job.gpu is not None:
            for index in [g.index for g in job.gpu_set] or [job.gpu]:
                self._tenants.discard(index, job.id)
        self._emit(
            events.CommandFinished(
                id=job.id, state=state, exit_code=outcome.exit_code, signal=outcome.signal, reason=outcome.reason,
                gpu=job.gpu, auto_regions=job.auto_regions, unprotected_timings=job.unprotected_timings,
                untracked_timings=job.untracked_timings,
                output_lost=job.output_loss.record() if job.output_loss.total else None, evaluation=job.evaluation,
            )
        )
        job.done.set()
        self._watcher.finished(job)
        self._history.ended(job)
        self.pump()

    async def follow_pools(self) -> None:
        """While the runtime serves: place again whenever the pools signal a worker
        ready, or a zygote refused (its queued forked commands fail)."""
        while True:
            await self._pools.ready.wait()
            self._pools.ready.clear()
            self.pump()

    # --- shutdown -----------------------------------------------------------

    def stop_admitting(self) -> None:
        """Refuse new commands from now on (the runtime is stopping)."""
        self.closed = True

    async def shutdown(self, mode: str, grace_s: float) -> None:
        """Stop admission; cancel what is queued; finish or cancel what runs."""
        self.closed = True
        while self.queue:
            job = self.queue.popleft()
            self._finish(job, Outcome("cancelled", None, None, "runtime shutting down"), "cancelled")
        running = [j for j in self.jobs.values() if j.state == "running"]
        if mode == "finish" and running:
            await asyncio.wait([asyncio.create_task(j.done.wait()) for j in running], timeout=grace_s)
        for job in running:
            if not job.done.is_set() and not job.ending:  # an ended one only waits for its certificate
                job.cancel("runtime shutting down")
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        self.reports.close_all()

