"""Per-GPU pools of persistent context processes, and pooled commands run in them.

A context process (krex_runtime/tenant/context_worker.py) is a tenant like any
process command: the interception library preloaded, its GPU's environment,
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
import itertools
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from krex_runtime.commands import worker_logs
from krex_runtime.commands.command_process import (
    READER_DRAIN_TIMEOUT_S,
    Outcome,
    child_setup,
    outcome_of,
    signal_of,
)
from krex_runtime.commands.context_process import ContextWorker, PooledRun, describe_exit
from krex_runtime.commands.environment import AdmitError, TenantSetup
from krex_runtime.commands.output import OutputLoss, OutputSink, pipe_reader, pump_output
from krex_runtime.host import cgroups, process_tree
from krex_runtime.node.config import PoolSection
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.tenant.worker_link import hello, new_key
from krex_runtime.wire import events

log = logging.getLogger("krex.pool")
RETRY_BASE_S, RETRY_MAX_S = 0.5, 30.0
LINE_LIMIT = 1 << 20
# What a context process may send next, after each message it sends (and
# `done` once it has been given a `run`); anything else is misbehaving.
NEXT: dict[str, set[str]] = {
    "imported": {"ready", "failed"}, "ready": set(), "failed": set(), "done": {"clean"}, "clean": set(),
}


class ContextPool:
    def __init__(
        self, settings: PoolSection, kill_grace_s: float, gpus: list[Gpu], sink: EventSink, setup: TenantSetup,
        log_dir: Path, on_idle: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.kill_grace_s = kill_grace_s
        self.gpus = {g.index: g for g in gpus}
        self.size = settings.size_per_gpu
        self.workers: dict[str, ContextWorker] = {}
        self._emit = sink.emit
        self._setup = setup
        self._log_dir = log_dir
        self._on_idle = on_idle  # the dispatcher's: a queued pooled command may start now
        self._create: asyncio.Queue[int] = asyncio.Queue()
        self._failures: dict[int, int] = {g.index: 0 for g in gpus}
        self._ids = itertools.count(1)
        self._nonce = secrets.token_hex(2)
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._creator: asyncio.Task[None] | None = None
        self._starting = asyncio.Semaphore(max(1, os.cpu_count() or 1))
        self._context_turn = asyncio.Lock()  # one CUDA context creation at a time, node-wide

    # --- the dispatcher's view ------------------------------------------------

    def start(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        worker_logs.prune(self._log_dir, "pool-", set())
        for _ in range(self.size):
            for gpu in self.gpus:
                self._create.put_nowait(gpu)
        self._creator = asyncio.create_task(self._creation_loop())

    def has_idle(self, gpu: int) -> bool:
        return any(w.gpu == gpu and w.state == "idle" for w in self.workers.values())

    def take(self, gpu: int, command_id: str) -> ContextWorker:
        """Hand an idle context process of `gpu` to a command (has_idle said there is one)."""
        worker = min((w for w in self.workers.values() if w.gpu == gpu and w.state == "idle"), key=lambda w: w.served)
        worker.state, worker.job_id = "busy", command_id
        worker.run = PooledRun(worker)
        self._emit(events.PoolWorkerBusy(gpu=gpu, worker=worker.id, command=command_id))
        return worker

    def job_of(self, worker_id: str) -> str | None:
        """The command a context process runs now (the region channel asks by its id)."""
        worker = self.workers.get(worker_id)
        return worker.job_id if worker is not None and worker.state == "busy" else None

    def is_worker(self, command_id: str) -> bool:
        return command_id.startswith(f"pool-{self._nonce}-")

    def recycle(self, gpu: int, now: bool) -> int:
        """Replace every context process of `gpu`: after its current command, or at once."""
        mine = [w for w in self.workers.values() if w.gpu == gpu]
        for worker in mine:
            if worker.state in ("idle", "warming"):
                self._retire(worker, "recycled", "recycled by operator")
            elif now and worker.state == "busy" and worker.run is not None:
                worker.run.cancel("recycled", state="failed", cause="recycled")
            elif now:
                self._retire(worker, "recycled", "recycled by operator")
            else:
                worker.retire_after = "recycled by operator"
        return len(mine)

    def stop_replacing(self) -> None:
        """From runtime shutdown on: context processes that end are not replaced."""
        self._closing = True
        if self._creator is not None:
            self._creator.cancel()

    async def shutdown(self) -> None:
        self.stop_replacing()
        for worker in list(self.workers.values()):
            self._retire(worker, "shutdown", "runtime stopping", replace=False)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=30)

    # --- running one command --------------------------------------------------------

    async def run(
        self,
        worker: ContextWorker,
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
            self._retire(worker, "exited", f"context process unreachable: {exc}")
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
            self._retire(worker, run.cause, why)
        elif message in done or worker.exited in done:
            outcome = await self._channel_ended(worker)
        else:
            returncode = await self._end_tree(worker)
            outcome = Outcome("timeout", None, signal_of(returncode), f"exceeded its {timeout_s:g} s limit")
            self._retire(worker, "timeout", f"its command exceeded its {timeout_s:g} s limit")
        for task in (message, cancelled):
            task.cancel()
        await asyncio.wait(readers, timeout=READER_DRAIN_TIMEOUT_S)
        for r in readers:
            r.cancel()
        return outcome

    async def _channel_ended(self, worker: ContextWorker) -> Outcome:
        """Its channel ended while its command ran: it died (crashed, os._exit),
        or something in it closed the socket and it lives on (ended here)."""
        try:
            returncode = await asyncio.wait_for(asyncio.shield(worker.exited), self.kill_grace_s)
        except TimeoutError:
            returncode = await self._end_tree(worker)
            why = "its context process closed its control channel while the command ran"
            self._retire(worker, "misbehaved", why)
            return Outcome("failed", None, signal_of(returncode), why)
        self._retire(worker, "exited", f"context process ended with its command ({describe_exit(returncode)})")
        return outcome_of(returncode)

    def _after_command(self, worker: ContextWorker, command_id: str) -> None:
        worker.state, worker.job_id, worker.run = "cleaning", None, None
        self._emit(events.PoolWorkerCleaning(gpu=worker.gpu, worker=worker.id, command=command_id))
        if worker.served >= self.settings.max_commands:
            self._retire(worker, "max_commands", f"served {worker.served} commands")
            return
        self._spawn(self._await_clean(worker))

    async def _await_clean(self, worker: ContextWorker) -> None:
        reply = await worker.next_message(self.settings.clean_timeout_s)
        if worker.state != "cleaning":
            return
        if reply is None:
            if worker.exited.done():
                self._retire(worker, "exited", f"context process died in cleanup ({describe_exit(worker.exited.result())})")
            else:
                self._retire(worker, "clean_timeout", f"no cleanup report within {self.settings.clean_timeout_s:g} s")
        elif not reply.get("ok"):
            self._retire(worker, reply.get("cause") or "cleanup", reply.get("reason", ""))
        elif worker.retire_after:
            self._retire(worker, "recycled", worker.retire_after)
        else:
            worker.state = "idle"
            self._emit(
                events.PoolWorkerIdle(gpu=worker.gpu, worker=worker.id, served=worker.served, clean_s=reply.get("clean_s"))
            )
            self._on_idle()

    def _leftovers(self, worker: ContextWorker, command_id: str) -> set[int]:
        return {p for p in process_tree.members(worker.pid, command_id, worker.cgroup) - {worker.pid}
                if process_tree.not_zombie(p)}

    async def _end_tree(self, worker: ContextWorker) -> int:
        """SIGTERM the context process's tree, the grace period, then SIGKILL."""
        process_tree.signal_tree(worker.pid, worker.id, worker.cgroup, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(worker.exited), self.kill_grace_s)
        except TimeoutError:
            pass
        process_tree.kill_tree(worker.pid, worker.id, worker.cgroup)
        return await worker.exited

    # --- creating and retiring context processes ------------------------------------------

    async def _creation_loop(self) -> None:
        while True:
            gpu = await self._create.get()
            if self._closing:
                return
            self._spawn(self._start_worker_guarded(gpu))

    async def _start_worker_guarded(self, gpu: int) -> None:
        async with self._starting:  # at most a CPU's worth of imports at once
            try:
                await self._start_worker(gpu)
            except Exception:  # one failed creation must not stop the pool
                log.exception("starting a context process on GPU %d", gpu)
                self._retry_later(gpu)

    async def _start_worker(self, gpu_index: int) -> None:
        gpu = self.gpus[gpu_index]
        worker_id = f"pool-{self._nonce}-g{gpu_index}-{next(self._ids)}"
        tenant_id = self._setup.new_tenant_id()
        try:
            identity = self._setup.admit(gpu_index, tenant_id)  # its uid, its gate entries
        except AdmitError as exc:
            return self._cannot_start(gpu_index, str(exc))
        slice_ = self._setup.cgroups
        cgroup = slice_.create(worker_id) if slice_ is not None else None
        runtime_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        spec = {
            "preload": list(self.settings.preload),
            "context": self._context_kind(gpu),
            "health_check": self.settings.health_check,
        }
        # Its channel is its stdin and its first line: nothing of it on the
        # command line, where a command inside could read it in /proc.
        key = new_key()
        runtime_end.sendall(hello(key, spec))
        log_file = (self._log_dir / f"{worker_id}.log").open("ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",
                "-m",
                "krex_runtime.tenant.context_worker",
                stdin=worker_end,
                stdout=log_file,
                stderr=log_file,
                cwd="/",
                env=self._setup.env.build(worker_id, tenant_id, {}, gpu, identity),
                start_new_session=True,
                preexec_fn=child_setup(cgroup, self._setup.cores_of(gpu_index), self._setup.run_as_for(identity)),
            )
        except OSError as exc:
            runtime_end.close()
            if cgroup is not None:
                cgroup.rmdir()
            self._setup.dismiss(gpu_index, tenant_id, identity)
            return self._cannot_start(gpu_index, str(exc))
        finally:
            worker_end.close()
            log_file.close()
        reader, writer = await asyncio.open_unix_connection(sock=runtime_end, limit=LINE_LIMIT)
        worker = ContextWorker(worker_id, gpu_index, tenant_id, cgroup, proc, runtime_end, reader, writer,
                               asyncio.create_task(proc.wait()), identity=identity, key=key)
        self.workers[worker_id] = worker
        self._spawn(self._listen(worker))
        worker.exited.add_done_callback(lambda _t: self._on_exit(worker))
        self._emit(events.PoolWorkerStarted(gpu=gpu_index, worker=worker_id, pid=proc.pid, tenant_id=tenant_id))
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
            self._failures[gpu_index] = 0
            worker.state = "idle"
            self._emit(
                events.PoolWorkerReady(
                    gpu=gpu_index, worker=worker_id, startup_s=reply.get("startup_s"), context=reply.get("context", "")
                )
            )
            self._on_idle()
            return
        if reply is not None:
            why = reply.get("reason", "start-up failed")
        elif worker.exited.done():
            why = f"exited during start-up ({describe_exit(worker.exited.result())})"
        else:
            why = f"not ready within {self.settings.start_timeout_s:g} s"
        log.warning("context process %s on GPU %d failed to start: %s (log: %s)", worker_id, gpu_index, why,
                    self._log_dir / f"{worker_id}.log")
        self._failures[gpu_index] += 1
        self._retire(worker, "start_failed", why)

    async def _listen(self, worker: ContextWorker) -> None:
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
                self._retire(worker, "start_failed", why)
            else:
                self._retire(worker, "misbehaved", why)
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

    def _retire(self, worker: ContextWorker, cause: str, reason: str, replace: bool = True) -> None:
        """End a context process and its tree; queue its replacement."""
        if worker.state == "retired":
            return
        worker.state = "retired"
        self.workers.pop(worker.id, None)
        if worker.run is not None:
            worker.run.cancel(reason, state="failed", cause=cause)
        self._spawn(self._bury(worker))
        if replace and not self._closing:
            self._emit(events.PoolWorkerReplaced(gpu=worker.gpu, worker=worker.id, cause=cause, reason=reason))
            if cause == "start_failed":
                self._retry_later(worker.gpu)
            else:
                self._create.put_nowait(worker.gpu)
        else:
            self._emit(events.PoolWorkerStopped(gpu=worker.gpu, worker=worker.id, reason=reason))

    def _retry_later(self, gpu: int) -> None:
        """A GPU whose context processes fail to start is retried with growing pauses."""
        delay = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** max(0, self._failures[gpu] - 1))
        asyncio.get_running_loop().call_later(delay, lambda: None if self._closing else self._create.put_nowait(gpu))

    async def _bury(self, worker: ContextWorker) -> None:
        process_tree.kill_tree(worker.pid, worker.id, worker.cgroup)
        try:
            await asyncio.wait_for(asyncio.shield(worker.exited), 10)
        except TimeoutError:
            log.warning("context process %s did not exit after SIGKILL", worker.id)
        worker.writer.close()
        if worker.cgroup is not None:
            await asyncio.to_thread(cgroups.kill_and_remove, worker.cgroup)
        self._setup.dismiss(worker.gpu, worker.tenant_id, worker.identity)
        worker_logs.prune(self._log_dir, "pool-", set(self.workers))

    def _on_exit(self, worker: ContextWorker) -> None:
        """A context process that dies while idle (killed from outside) is replaced."""
        if worker.state == "idle" and not self._closing:
            returncode = worker.exited.result() if not worker.exited.cancelled() else None
            self._retire(worker, "exited", f"context process exited while idle ({describe_exit(returncode)})")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
