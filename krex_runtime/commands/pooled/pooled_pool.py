"""Per-GPU pools of persistent context processes, and pooled commands run in them.

A context process (krex_runtime/tenant/context_worker.py; here
pooled_worker.py) is a tenant like any process command: the interception
library preloaded, its GPU's environment,
a cgroup of its own, so the region manager gates, drains and freezes it. It
imports the configured modules and creates its CUDA context once; then it runs
pooled commands one at a time.

Context processes start in parallel (their imports are CPU work: torch and
triton take seconds each), but creating a CUDA context takes a node-wide
driver lock, so the contexts themselves are created one at a time: a process
reports `imported`, waits for its turn, then creates its context. Created all
at once they convoy and each takes several times longer. Replacements are
queued the moment a process retires, so the pool is warm again before the
next command needs it.

A context process is replaced when it crashed, when its command timed out or
was cancelled (its whole tree is ended), when it fails its cleanup or health
check, when it has served `pool.max_commands` commands, on `recycle`, and
when it misbehaves on its channel: a line it did not sign (a command inside
it wrote on the socket), a message that is not well formed, or one it has no
business sending now (tenant/worker_link.py). A command in a process that
misbehaves fails; the pool never waits on such a process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from krex_runtime.commands.environment import AdmitError, TenantSetup
from krex_runtime.commands.launch import Outcome, child_setup, describe_exit, outcome_of, signal_of
from krex_runtime.commands.output import READER_DRAIN_TIMEOUT_S, OutputLoss, OutputSink, pipe_reader, pump_output
from krex_runtime.commands.pooled.pooled_worker import PooledRun, PooledWorker
from krex_runtime.commands.workers.worker_pool import WorkerPool
from krex_runtime.host import process_tree
from krex_runtime.node.config import PoolSection
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.tenant.worker_link import hello, new_key
from krex_runtime.wire.state import events

log = logging.getLogger("krex.pool")
LINE_LIMIT = 1 << 20
# What a context process may send next, after each message it sends (and
# `done` once it has been given a `run`); anything else is misbehaving.
NEXT: dict[str, set[str]] = {
    "imported": {"ready", "failed"}, "ready": set(), "failed": set(), "done": {"clean"}, "clean": set(),
}


class PooledPool(WorkerPool[PooledWorker]):
    def __init__(
        self, settings: PoolSection, kill_grace_s: float, gpus: list[Gpu], sink: EventSink, setup: TenantSetup,
        log_dir: Path, ready: Callable[[], None],
    ) -> None:
        super().__init__("pool", "context process", gpus, log_dir, ready, log)
        self.settings = settings
        self.kill_grace_s = kill_grace_s
        self.size = settings.size_per_gpu
        self._emit = sink.emit
        self._setup = setup
        self._create: asyncio.Queue[int] = asyncio.Queue()
        self._creator: asyncio.Task[None] | None = None
        self._starting = asyncio.Semaphore(max(1, os.cpu_count() or 1))
        self._context_turn = asyncio.Lock()  # one CUDA context creation at a time, node-wide

    # --- what placing a command asks ------------------------------------------

    def per_gpu(self) -> int:
        return self.size

    def start(self) -> None:
        super().start()
        self._creator = asyncio.create_task(self._creation_loop())

    def has_idle(self, gpu: int) -> bool:
        return any(w.gpu == gpu and w.state == "idle" for w in self.workers.values())

    def take(self, gpu: int, command_id: str) -> PooledWorker:
        """Hand an idle context process of `gpu` to a command (has_idle said there is one)."""
        worker = min((w for w in self.workers.values() if w.gpu == gpu and w.state == "idle"), key=lambda w: w.served)
        worker.state, worker.job_id = "busy", command_id
        worker.run = PooledRun(worker)
        self._emit(events.PoolWorkerBusy(gpu=gpu, worker=worker.id, command=command_id))
        return worker

    def command_of(self, pid: int, command_id: str) -> str | None:
        """A context process is whichever pooled command it runs now (asked by its id)."""
        worker = self.workers.get(command_id)
        if worker is None:
            return "" if self.started(pid, command_id) else None
        return worker.job_id if worker.state == "busy" and worker.job_id is not None else ""

    def recycle(self, gpu: int, now: bool) -> int:
        """Replace every context process of `gpu`: after its current command, or at once."""
        mine = [w for w in self.workers.values() if w.gpu == gpu]
        for worker in mine:
            if worker.state in ("idle", "warming"):
                self._retire(worker, "recycled by operator", "recycled")
            elif now and worker.state == "busy" and worker.run is not None:
                worker.run.cancel("recycled", state="failed", cause="recycled")
            elif now:
                self._retire(worker, "recycled by operator", "recycled")
            else:
                worker.retire_after = "recycled by operator"
        return len(mine)

    def stop_replacing(self) -> None:
        super().stop_replacing()
        if self._creator is not None:
            self._creator.cancel()

    # --- running one command --------------------------------------------------------

    async def run(
        self,
        worker: PooledWorker,
        command_id: str,
        entry: dict[str, Any],
        cwd: str,
        env: dict[str, str],
        timeout_s: float,
        stdout_path: Path,
        stderr_path: Path,
        sink: OutputSink,
        loss: OutputLoss,
        orphan_grace_s: float = 0.0,
    ) -> Outcome:
        run = worker.run
        assert run is not None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        worker.expect = {"done"}
        try:
            await worker.send({"type": "run", "id": command_id, "entry": entry, "cwd": cwd, "env": env}, [out_w, err_w])
        except OSError as exc:
            for fd in (out_r, err_r):
                os.close(fd)
            self._retire(worker, f"context process unreachable: {exc}", "exited")
            return Outcome("failed", None, None, f"context process unreachable: {exc}")
        finally:
            os.close(out_w)
            os.close(err_w)
        readers = [
            asyncio.create_task(pump_output(await pipe_reader(out_r), "stdout", stdout_path, sink, loss)),
            asyncio.create_task(pump_output(await pipe_reader(err_r), "stderr", stderr_path, sink, loss)),
        ]
        message = asyncio.create_task(worker.inbox.get())
        cancelled = asyncio.create_task(run.cancelled.wait())
        done, _ = await asyncio.wait(
            {message, worker.exited, cancelled}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        reply = message.result() if message in done else None
        if reply is not None:  # `done`: nothing else passes the channel now
            worker.served += 1
            outcome = Outcome(reply["state"], reply["exit_code"], reply["signal"], reply["reason"])
            # The entry point returned: its command's end. What it started gets the grace.
            await process_tree.leftovers_grace(lambda: bool(self._leftovers(worker, command_id)), orphan_grace_s,
                                               run.cancelled)
            process_tree.kill_all(self._leftovers(worker, command_id))  # as with a process command
            self._after_command(worker, command_id)
        elif run.cancelled.is_set():
            returncode = await self._end_tree(worker)
            outcome = Outcome(run.state, None, signal_of(returncode), run.reason)
            why = "recycled by operator" if run.cause == "recycled" else f"its command was cancelled ({run.reason})"
            self._retire(worker, why, run.cause)
        elif message in done or worker.exited in done:
            outcome = await self._channel_ended(worker)
        else:
            returncode = await self._end_tree(worker)
            outcome = Outcome("timeout", None, signal_of(returncode), f"exceeded its {timeout_s:g} s limit")
            self._retire(worker, f"its command exceeded its {timeout_s:g} s limit", "timeout")
        for task in (message, cancelled):
            task.cancel()
        await asyncio.wait(readers, timeout=READER_DRAIN_TIMEOUT_S)
        for r in readers:
            r.cancel()
        return outcome

    async def _channel_ended(self, worker: PooledWorker) -> Outcome:
        """Its channel ended while its command ran: it died (crashed, os._exit),
        or something in it closed the socket and it lives on (ended here)."""
        try:
            returncode = await asyncio.wait_for(asyncio.shield(worker.exited), self.kill_grace_s)
        except TimeoutError:
            returncode = await self._end_tree(worker)
            why = "its context process closed its control channel while the command ran"
            self._retire(worker, why, "misbehaved")
            return Outcome("failed", None, signal_of(returncode), why)
        self._retire(worker, f"context process ended with its command ({describe_exit(returncode)})", "exited")
        return outcome_of(returncode)

    def _after_command(self, worker: PooledWorker, command_id: str) -> None:
        worker.state, worker.job_id, worker.run = "cleaning", None, None
        self._emit(events.PoolWorkerCleaning(gpu=worker.gpu, worker=worker.id, command=command_id))
        if worker.served >= self.settings.max_commands:
            self._retire(worker, f"served {worker.served} commands", "max_commands")
            return
        self._spawn(self._await_clean(worker))

    async def _await_clean(self, worker: PooledWorker) -> None:
        reply = await worker.next_message(self.settings.clean_timeout_s)
        if worker.state != "cleaning":
            return
        if reply is None:
            if worker.exited.done():
                self._retire(worker, f"context process died in cleanup ({describe_exit(worker.exited.result())})", "exited")
            else:
                self._retire(worker, f"no cleanup report within {self.settings.clean_timeout_s:g} s", "clean_timeout")
        elif not reply.get("ok"):
            self._retire(worker, reply.get("reason", ""), reply.get("cause") or "cleanup")
        elif worker.retire_after:
            self._retire(worker, worker.retire_after, "recycled")
        else:
            worker.state = "idle"
            self._emit(
                events.PoolWorkerIdle(gpu=worker.gpu, worker=worker.id, served=worker.served, clean_s=reply.get("clean_s"))
            )
            self._ready()

    def _leftovers(self, worker: PooledWorker, command_id: str) -> set[int]:
        return {p for p in process_tree.members(worker.pid, command_id, worker.cgroup) - {worker.pid}
                if process_tree.not_zombie(p)}

    async def _end_tree(self, worker: PooledWorker) -> int:
        """SIGTERM the context process's tree, the grace period, then SIGKILL."""
        process_tree.signal_tree(worker.pid, worker.id, worker.cgroup, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(worker.exited), self.kill_grace_s)
        except TimeoutError:
            pass
        process_tree.kill_tree(worker.pid, worker.id, worker.cgroup)
        return await worker.exited

    # --- creating and retiring context processes ------------------------------------------

    def _replace(self, gpu: int) -> None:
        self._create.put_nowait(gpu)  # started in parallel by the creation loop, a CPU's worth at once

    async def _creation_loop(self) -> None:
        while True:
            gpu = await self._create.get()
            if self._closing:
                return
            self._spawn(self._start_guarded(gpu))

    async def _start_guarded(self, gpu: int) -> None:
        async with self._starting:  # at most a CPU's worth of imports at once
            await super()._start_guarded(gpu)

    async def _spawn_worker(self, gpu_index: int) -> PooledWorker | None:
        """Its process, admitted as a tenant (uid, gate entries, cgroup); None when it cannot start."""
        gpu = self.gpus[gpu_index]
        worker_id = self._new_id(gpu_index)
        tenant_id = self._setup.new_tenant_id()
        try:
            identity = self._setup.admit(gpu_index, tenant_id)  # its uid, its gate entries
        except AdmitError as exc:
            self._cannot_start(gpu_index, str(exc))
            return None
        slice_ = self._setup.cgroups
        cgroup = slice_.create(worker_id) if slice_ is not None else None
        spec = {
            "preload": list(self.settings.preload),
            "context": self._context_kind(gpu),
            "health_check": self.settings.health_check,
        }
        key = new_key()
        try:
            proc, runtime_end = await self._exec(
                worker_id, [sys.executable, "-P", "-m", "krex_runtime.tenant.context_worker"],
                self._setup.env.build(worker_id, tenant_id, {}, gpu, identity),
                child_setup(cgroup, self._setup.cores_of(gpu_index), self._setup.run_as_for(identity)),
                first_line=hello(key, spec),
            )
        except OSError as exc:
            if cgroup is not None:
                cgroup.rmdir()
            self._setup.dismiss(gpu_index, tenant_id, identity)
            self._cannot_start(gpu_index, str(exc))
            return None
        reader, writer = await asyncio.open_unix_connection(sock=runtime_end, limit=LINE_LIMIT)
        worker = PooledWorker(id=worker_id, gpu=gpu_index, proc=proc, sock=runtime_end, reader=reader, writer=writer,
                              exited=asyncio.create_task(proc.wait()), tenant_id=tenant_id, cgroup=cgroup,
                              identity=identity, key=key)
        self.workers[worker_id] = worker
        self._spawn(self._listen(worker))
        worker.exited.add_done_callback(lambda _t: self._on_exit(worker))
        self._emit(events.PoolWorkerStarted(gpu=gpu_index, worker=worker_id, pid=proc.pid, tenant_id=tenant_id))
        return worker

    async def _see_ready(self, worker: PooledWorker) -> None:
        """It imports; at its turn it creates its context; ready, it is idle (or retired)."""
        reply = await worker.next_message(self.settings.start_timeout_s)
        if worker.state != "warming":
            return  # recycled or stopped while it started
        if reply is not None and reply.get("type") == "imported":
            async with self._context_turn:
                if worker.state != "warming":
                    return
                await worker.send({"type": "create"}, [])
                reply = await worker.next_message(self.settings.start_timeout_s)
            if worker.state != "warming":
                return
        if reply is not None and reply.get("type") == "ready":
            self._failures[worker.gpu] = 0
            worker.state = "idle"
            self._emit(
                events.PoolWorkerReady(
                    gpu=worker.gpu, worker=worker.id, startup_s=reply.get("startup_s"), context=reply.get("context", "")
                )
            )
            self._ready()
            return
        if reply is not None:
            why = reply.get("reason", "start-up failed")
        elif worker.exited.done():
            why = f"exited during start-up ({describe_exit(worker.exited.result())})"
        else:
            why = f"not ready within {self.settings.start_timeout_s:g} s"
        log.warning("context process %s on GPU %d failed to start: %s (log: %s)", worker.id, worker.gpu, why,
                    self._log_of(worker.id))
        self._failures[worker.gpu] += 1
        self._retire(worker, why, "start_failed", backoff=True)

    async def _listen(self, worker: PooledWorker) -> None:
        """Pass its messages to whoever waits on them; replace it at the first
        one it had no business sending, or one that is not its own."""
        async for msg in worker.messages():
            if msg["type"] not in worker.expect:
                worker.misbehaved = f"an unexpected {msg['type']!r} message (while {worker.state})"
                break
            worker.expect = NEXT[msg["type"]]
            worker.inbox.put_nowait(msg)
        if worker.misbehaved and worker.state != "retired":
            log.warning("context process %s misbehaved on its control channel: %s", worker.id, worker.misbehaved)
            why = f"misbehaved on its control channel: {worker.misbehaved}"
            if worker.state == "warming":
                self._failures[worker.gpu] += 1
                self._retire(worker, why, "start_failed", backoff=True)
            else:
                self._retire(worker, why, "misbehaved")
        worker.inbox.put_nowait(None)

    def _cannot_start(self, gpu: int, why: str) -> None:
        log.error("cannot start a context process on GPU %d: %s", gpu, why)
        self._retry_later(gpu)

    def _context_kind(self, gpu: Gpu) -> str:
        if self.settings.context != "auto":
            return "sim" if gpu.simulated and self.settings.context == "driver" else self.settings.context
        if gpu.simulated:
            return "sim"
        return "torch" if "torch" in self.settings.preload else "driver"

    def _announce_retired(self, worker: PooledWorker, cause: str, reason: str, replaced: bool) -> None:
        if worker.run is not None:
            worker.run.cancel(reason, state="failed", cause=cause)
        if replaced:
            self._emit(events.PoolWorkerReplaced(gpu=worker.gpu, worker=worker.id, cause=cause, reason=reason))
        else:
            self._emit(events.PoolWorkerStopped(gpu=worker.gpu, worker=worker.id, reason=reason))

    def _buried(self, worker: PooledWorker) -> None:
        self._setup.dismiss(worker.gpu, worker.tenant_id, worker.identity)  # its uid and gate entries go back

    def _on_exit(self, worker: PooledWorker) -> None:
        """A context process that dies while idle (killed from outside) is replaced."""
        if worker.state == "idle" and not self._closing:
            returncode = worker.exited.result() if not worker.exited.cancelled() else None
            self._retire(worker, f"context process exited while idle ({describe_exit(returncode)})", "exited")
