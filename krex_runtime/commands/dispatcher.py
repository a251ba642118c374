"""Admission: a FIFO queue, per-GPU slots, GPU choice, and the life of each command.

Order is FIFO per GPU: a command pinned to a busy GPU holds back later commands
for that GPU only; a command that may go anywhere takes the least-loaded GPU
with a free slot, and when none is free it holds back everything behind it.
The policy sets the slots: `command` allows one command per GPU (the
exclusive baseline), `ungated` and `krex` allow `slots_per_gpu`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from krex_runtime.node.access import RunAs
from krex_runtime.commands.cgroups import CgroupSlice
from krex_runtime.commands.command_process import CommandProcess, LaunchSpec, Outcome
from krex_runtime.node.config import Config, environment_problem
from krex_runtime.commands.context_pool import ContextPool, ContextWorker, PooledRun
from krex_runtime.node.gpus import Gpu
from krex_runtime.tenant.pooled_entry import EntryError, parse_entry
from krex_runtime.wire import events
from krex_runtime.wire.bodies import SubmitBody
from krex_runtime.wire.protocol import ErrorCode, ProtocolError

log = logging.getLogger("krex.dispatcher")

Emit = Callable[[dict[str, Any]], None]
TenantEnv = Callable[["Job", Gpu], dict[str, str]]
# Takes a whole-device lease for a command and returns the release function.
LeaseTaker = Callable[["Job"], Awaitable[Callable[[], None]]]


@dataclass
class Job:
    id: str
    argv: list[str]
    gpu_request: int | None
    timeout_s: float
    cwd: str
    env: dict[str, str]
    label: str
    submitted_at: float
    state: str = "queued"
    gpu: int | None = None
    tenant_id: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    process: CommandProcess | PooledRun | None = None
    outcome: Outcome | None = None
    stdout_path: Path | None = None
    stderr_path: Path | None = None
    cgroup: Path | None = None
    lease: bool = False
    internal: bool = False  # started by the runtime itself (a canary): takes no slot
    mode: str = "process"  # process | pooled
    entry: dict[str, Any] | None = None  # pooled: what the context process runs
    worker: str | None = None  # pooled: the context process that runs it
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def result(self) -> dict[str, Any]:
        """The record `krex run --json` and `krex wait --json` print."""
        o = self.outcome
        started = self.started_at
        finished = self.finished_at
        return {
            "id": self.id,
            "label": self.label,
            "gpu": self.gpu,
            "state": self.state,
            "exit_code": o.exit_code if o else None,
            "signal": o.signal if o else None,
            "reason": o.reason if o else "",
            "submitted_at": self.submitted_at,
            "started_at": started,
            "finished_at": finished,
            "queue_s": (started if started is not None else finished or self.submitted_at) - self.submitted_at,
            "run_s": (finished - started) if started is not None and finished is not None else None,
            "total_s": (finished - self.submitted_at) if finished is not None else None,
            "lease": self.lease,
            "mode": self.mode,
            "worker": self.worker,
            "stdout_path": str(self.stdout_path) if self.stdout_path else None,
            "stderr_path": str(self.stderr_path) if self.stderr_path else None,
        }


def check_spawnable(body: SubmitBody) -> None:
    """A bad_request for what no process can be started with: the kernel takes
    argv, cwd and the environment as C strings."""
    for where, text in [("argv", a) for a in body.argv] + [("cwd", body.cwd)]:
        if "\0" in text:
            raise ProtocolError(ErrorCode.BAD_REQUEST, f"{where} holds a NUL character: {text[:60]!r}")
    problem = environment_problem(body.env)
    if problem is not None:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"env: {problem}")


class Dispatcher:
    def __init__(
        self,
        config: Config,
        gpus: list[Gpu],
        emit: Emit,
        tenant_env: TenantEnv,
        output_dir: Path,
        cgroup_slice: CgroupSlice | None,
        on_output: Callable[[Job, str, bytes], None],
        on_finished: Callable[[Job], None],
        tenant_cores: Callable[[int], tuple[int, ...]] = lambda gpu: (),
        take_lease: LeaseTaker | None = None,
        run_as: RunAs | None = None,
    ) -> None:
        self.config = config
        self.gpus = {g.index: g for g in gpus}
        self.slots = 1 if config.runtime.policy == "command" else config.dispatcher.slots_per_gpu
        self.queue: deque[Job] = deque()
        self.jobs: dict[str, Job] = {}
        self.running: dict[int, set[str]] = {g.index: set() for g in gpus}
        self.paused_node = False
        self.paused_gpus: set[int] = set()
        self.closed = False
        self._emit = emit
        self._tenant_env = tenant_env
        self._output_dir = output_dir
        self._slice = cgroup_slice
        self._on_output = on_output
        self._on_finished = on_finished
        self._tenant_cores = tenant_cores
        self._take_lease = take_lease
        self._run_as = run_as
        self.leased_gpus: set[int] = set()
        self._finished: deque[str] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._nonce = secrets.token_hex(2)
        self._ids = itertools.count(1)
        self._tenant_ids = itertools.count(1)
        self.pool: ContextPool | None = None  # set by the service when pool.size_per_gpu > 0

    def new_tenant_id(self) -> int:
        return next(self._tenant_ids)

    # --- requests ---------------------------------------------------------

    def submit(self, body: SubmitBody) -> Job:
        if self.closed:
            raise ProtocolError(ErrorCode.REFUSED, "the runtime is shutting down and admits no new command")
        if not body.argv or not body.argv[0]:
            raise ProtocolError(ErrorCode.BAD_REQUEST, "argv must name a program")
        check_spawnable(body)
        self.check_gpu(body.gpu)
        if body.timeout_s is not None and body.timeout_s <= 0:
            raise ProtocolError(ErrorCode.BAD_REQUEST, "timeout_s must be positive")
        if body.lease and self._take_lease is None:
            raise ProtocolError(ErrorCode.REFUSED, "leases need policy 'krex'")
        entry = None
        if body.mode == "pooled":
            if self.pool is None:
                raise ProtocolError(ErrorCode.REFUSED, "pooled commands need a context pool (pool.size_per_gpu >= 1)")
            try:
                entry = parse_entry(list(body.argv)).to_dict()
            except EntryError as exc:
                raise ProtocolError(ErrorCode.BAD_REQUEST, str(exc)) from None
        if len(self.queue) >= self.config.dispatcher.max_queued:
            raise ProtocolError(ErrorCode.QUEUE_FULL, f"admission queue is full ({len(self.queue)} commands)")
        job = Job(
            id=f"{self._nonce}-{next(self._ids)}",
            argv=list(body.argv),
            gpu_request=body.gpu,
            timeout_s=body.timeout_s or self.config.dispatcher.default_timeout_s,
            cwd=body.cwd,
            env=dict(body.env),
            label=body.label,
            submitted_at=time.time(),
            lease=body.lease,
            mode=body.mode,
            entry=entry,
        )
        self.jobs[job.id] = job
        self.queue.append(job)
        self._emit(
            events.CommandQueued(
                id=job.id, argv=job.argv, gpu=job.gpu_request, timeout_s=job.timeout_s, label=job.label,
                lease=job.lease, mode=job.mode,
            )
        )
        self.pump()
        return job

    def find(self, command_id: str) -> Job:
        job = self.jobs.get(command_id)
        if job is None:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no command {command_id!r} (unknown, or finished long ago)")
        return job

    def cancel(self, command_id: str, reason: str = "cancelled by request") -> Job:
        job = self.find(command_id)
        if job.state == "queued":
            self.queue.remove(job)
            self._finish(job, Outcome("cancelled", None, None, reason), "cancelled")
        elif job.state == "running" and job.process is not None:
            job.process.cancel(reason)
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

    def running_on(self, gpu: int) -> list[Job]:
        return [self.jobs[i] for i in self.running[gpu] if i in self.jobs and self.jobs[i].process is not None]

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
        for job in list(self.queue):
            if len(blocked) == len(self.gpus):
                break
            if job.gpu_request is not None:
                free = job.gpu_request not in blocked and self._free(job.gpu_request, job)
                gpu = job.gpu_request if free else None
                if gpu is None:
                    blocked.add(job.gpu_request)
                    continue
            else:
                candidates = [i for i in self.gpus if i not in blocked and self._free(i, job)]
                if not candidates:
                    break
                gpu = min(candidates, key=lambda i: (self._load(i), i))
            self.queue.remove(job)
            self._start(job, gpu)

    def _free(self, gpu: int, job: Job) -> bool:
        """A slot, and for a pooled command a ready context process: it never waits
        for one to be created while another is idle elsewhere."""
        if self._load(gpu) >= self.slots:
            return False
        return job.mode != "pooled" or (self.pool is not None and self.pool.has_idle(gpu))

    def _load(self, gpu: int) -> int:
        return sum(1 for i in self.running[gpu] if not self.jobs[i].internal)
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
        self._emit(events.CommandQueued(id=job.id, argv=argv, gpu=gpu, timeout_s=None, label=label, lease=False))
        self._start(job, gpu)
        return job

    def _start(self, job: Job, gpu_index: int) -> None:
        gpu = self.gpus[gpu_index]
        job.state, job.gpu = "running", gpu_index
        worker = None
        if job.mode == "pooled":
            assert self.pool is not None
            worker = self.pool.take(gpu_index, job.id)
            # The context process's tenant id: its interception library and
            # gate slot were set up under it.
            job.tenant_id, job.worker = worker.tenant_id, worker.id
        else:
            job.tenant_id = self.new_tenant_id()
        job.stdout_path = self._output_dir / f"{job.id}.stdout"
        job.stderr_path = self._output_dir / f"{job.id}.stderr"
        self.running[gpu_index].add(job.id)
        task = asyncio.create_task(self._run(job, gpu, worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: Job, gpu: Gpu, worker: ContextWorker | None = None) -> None:
        release_lease: Callable[[], None] | None = None
        if job.lease:
            assert self._take_lease is not None
            self.leased_gpus.add(gpu.index)
            try:
                release_lease = await self._take_lease(job)
            except Exception as exc:
                self.leased_gpus.discard(gpu.index)
                self._finish(job, Outcome("failed", None, None, f"lease refused: {exc}"), "failed", started=False)
                return
        try:
            if worker is not None:
                await self._run_pooled(job, gpu, worker)
            else:
                await self._run_process(job, gpu)
        finally:
            if release_lease is not None:
                release_lease()
                self.leased_gpus.discard(gpu.index)
                self.pump()

    async def _run_process(self, job: Job, gpu: Gpu) -> None:
        cgroup = self._slice.create(f"cmd-{job.id}") if self._slice is not None else None
        job.cgroup = cgroup
        assert job.stdout_path is not None and job.stderr_path is not None
        spec = LaunchSpec(
            command_id=job.id,
            argv=job.argv,
            cwd=job.cwd,
            env=self._tenant_env(job, gpu),
            timeout_s=job.timeout_s,
            kill_grace_s=self.config.dispatcher.kill_grace_s,
            stdout_path=job.stdout_path,
            stderr_path=job.stderr_path,
            cgroup=cgroup,
            cpus=self._tenant_cores(gpu.index),
            run_as=self._run_as,
        )
        process = CommandProcess(spec, lambda stream, data: self._on_output(job, stream, data))
        job.process = process
        failure = await process.start()
        if failure is not None:
            if cgroup is not None:
                cgroup.rmdir()
            self._finish(job, failure, failure.state, started=False)
            return
        job.started_at = time.time()
        self._emit(events.CommandStarted(id=job.id, gpu=gpu.index, pid=process.pid, tenant_id=job.tenant_id))
        try:
            outcome = await process.wait()
        except Exception as exc:  # never leave a slot taken by a command we lost track of
            outcome = Outcome("failed", None, None, f"runtime error while running: {exc!r}")
        self._finish(job, outcome, outcome.state)

    async def _run_pooled(self, job: Job, gpu: Gpu, worker: ContextWorker) -> None:
        assert self.pool is not None and job.entry is not None
        assert job.stdout_path is not None and job.stderr_path is not None
        job.process, job.cgroup = worker.run, worker.cgroup
        job.started_at = time.time()
        self._emit(
            events.CommandStarted(id=job.id, gpu=gpu.index, pid=worker.pid, tenant_id=job.tenant_id, worker=worker.id)
        )
        try:
            outcome = await self.pool.run(
                worker,
                job.id,
                job.entry,
                job.cwd,
                self._tenant_env(job, gpu),
                job.timeout_s,
                job.stdout_path,
                job.stderr_path,
                lambda stream, data: self._on_output(job, stream, data),
            )
        except Exception as exc:  # never leave a slot taken by a command we lost track of
            outcome = Outcome("failed", None, None, f"runtime error while running: {exc!r}")
        self._finish(job, outcome, outcome.state)

    def _finish(self, job: Job, outcome: Outcome, state: str, started: bool = True) -> None:
        job.outcome, job.state, job.finished_at = outcome, state, time.time()
        if job.gpu is not None:
            self.running[job.gpu].discard(job.id)
        self._emit(
            events.CommandFinished(
                id=job.id, state=state, exit_code=outcome.exit_code, signal=outcome.signal, reason=outcome.reason,
                gpu=job.gpu,
            )
        )
        job.done.set()
        self._on_finished(job)
        self._finished.append(job.id)
        while len(self._finished) > self.config.dispatcher.keep_finished:
            forgotten = self.jobs.pop(self._finished.popleft(), None)
            if forgotten is not None:
                _remove_output(forgotten)
        self.pump()

    # --- shutdown -----------------------------------------------------------

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
            if job.process is not None and not job.done.is_set():
                job.process.cancel("runtime shutting down")
        if self._tasks:
            await asyncio.wait(set(self._tasks))


def base_tenant_env(
    command_id: str,
    tenant_id: int | None,
    command_env: dict[str, str],
    gpu: Gpu,
    extra: dict[str, str],
    endpoint: str,
    run_dir: Path,
) -> dict[str, str]:
    """The environment every tenant gets, before library and simulator settings.
    A context process gets it too, under its own id (its commands' ids are
    mapped to it by the runtime, never read from its environment)."""
    env = dict(os.environ)
    env.update(extra)
    env.update(command_env)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": gpu.visible_devices,
            "KREX_GPU": str(gpu.index),
            "KREX_GPU_UUID": gpu.uuid,
            "KREX_COMMAND_ID": command_id,
            "KREX_TENANT_ID": str(tenant_id),
            "KREX_ENDPOINT": endpoint,
            "KREX_RUN_DIR": str(run_dir),
        }
    )
    return env


def _remove_output(job: Job) -> None:
    """A command that left the history can no longer be waited on or attached
    to; its output files go with it, so the output folder (often on a RAM-backed
    /run) stays bounded however many commands a node runs."""
    for path in (job.stdout_path, job.stderr_path):
        if path is not None:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot remove %s: %s", path, exc.strerror)
