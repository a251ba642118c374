"""The life of a worker, written once for every mode's pool.

A worker is a process the runtime starts to serve commands of one mode on one
GPU: a context process (pooled mode), a zygote (forked mode), a context server
(forwarded mode). Every pool starts its workers the same way (its end of a
socket pair as the worker's stdin, its output to a log of its own, a session
of its own), keeps them by id, retires one whose life is over and replaces it
(at once, or after a pause that grows while the GPU's workers keep failing to
start, so a broken configuration does not spin), buries it (its tree ended,
its cgroup removed, the logs pruned), and answers whether a process is one
it started. The mode says what a worker is told, when it is ready, and what
its retirement announces; a pool tells whoever waits on it that a worker
became ready through the one `ready` callback it is given.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from krex_runtime.commands.workers import worker_logs
from krex_runtime.host import cgroups, process_tree
from krex_runtime.node.gpus import Gpu

RETRY_BASE_S, RETRY_MAX_S = 0.5, 30.0
BURY_WAIT_S = 10.0  # after SIGKILL, how long a worker may take to be reaped
SHUTDOWN_WAIT_S = 30.0
RETIRED = "retired"


class Worker(Protocol):
    """What a pool needs of each of its workers, whatever its mode."""

    state: str

    @property
    def id(self) -> str: ...

    @property
    def gpu(self) -> int: ...

    @property
    def pid(self) -> int: ...

    @property
    def cgroup(self) -> Path | None: ...

    @property
    def exited(self) -> asyncio.Task[int]: ...

    @property
    def writer(self) -> asyncio.StreamWriter: ...


W = TypeVar("W", bound=Worker)


@dataclass
class ChannelWorker:
    """A worker that serves one command at a time over its own channel (a
    context process, a context server): its process, its channel's ends,
    and the command it serves."""

    id: str
    gpu: int
    proc: asyncio.subprocess.Process
    sock: socket.socket
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    exited: asyncio.Task[int]
    state: str = "warming"  # warming | idle | busy | cleaning | retired
    served: int = 0
    job_id: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid


class WorkerPool(ABC, Generic[W]):
    def __init__(
        self, kind: str, noun: str, gpus: list[Gpu], log_dir: Path, ready: Callable[[], None], logger: logging.Logger,
    ) -> None:
        self.gpus = {g.index: g for g in gpus}
        self.workers: dict[str, W] = {}
        self._ids_start = f"{kind}-{secrets.token_hex(2)}-"  # every id this pool gives starts so
        self._logs_start = f"{kind}-"  # and every log of this kind, this run's or an earlier one's
        self._noun = noun
        self._log_dir = log_dir
        self._ready = ready  # a queued command may start now (or, forked, fail)
        self._log = logger
        self._ids = itertools.count(1)
        self._failures: dict[int, int] = {g.index: 0 for g in gpus}
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- what each mode says ------------------------------------------------------

    @abstractmethod
    def per_gpu(self) -> int:
        """How many workers each GPU keeps."""

    @abstractmethod
    async def _spawn_worker(self, gpu: int) -> W | None:
        """Start one worker on `gpu`, kept and listened to (None: it could not
        start, and the GPU is tried again later)."""

    @abstractmethod
    async def _see_ready(self, worker: W) -> None:
        """Wait for its word: ready, it serves (and `ready` is told); else it is retired."""

    @abstractmethod
    def _announce_retired(self, worker: W, cause: str, reason: str, replaced: bool) -> None:
        """What the mode says (events, logs, the run it ends) when a worker retires."""

    @abstractmethod
    def command_of(self, pid: int, command_id: str) -> str | None:
        """The command process `pid` (whose environment names `command_id`) acts
        for when it is one of this pool's processes ("" for none now); None
        when it is not this pool's."""

    # --- the pool's life --------------------------------------------------------

    def start(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        worker_logs.prune(self._log_dir, self._logs_start, set())
        for _ in range(self.per_gpu()):
            for gpu in self.gpus:
                self._replace(gpu)

    def stop_replacing(self) -> None:
        """From runtime shutdown on: workers that end are not replaced."""
        self._closing = True

    async def shutdown(self) -> None:
        self.stop_replacing()
        for worker in list(self.workers.values()):
            self._retire(worker, "runtime stopping", "shutdown", replace=False)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=SHUTDOWN_WAIT_S)

    def started(self, pid: int, command_id: str) -> bool:
        """Whether process `pid` is one this pool started: its environment names
        one of the pool's ids, or its pid is a live worker's."""
        return command_id.startswith(self._ids_start) or any(w.pid == pid for w in list(self.workers.values()))

    # --- starting, retiring, burying -----------------------------------------------

    def _new_id(self, gpu: int) -> str:
        return f"{self._ids_start}g{gpu}-{next(self._ids)}"

    def _replace(self, gpu: int) -> None:
        """Start a worker on `gpu` now."""
        self._spawn(self._start_guarded(gpu))

    async def _start_guarded(self, gpu: int) -> None:
        if self._closing:
            return
        try:
            worker = await self._spawn_worker(gpu)
            if worker is not None:
                await self._see_ready(worker)
        except Exception:  # one failed start must not stop the pool for good
            self._log.exception("starting a %s on GPU %d", self._noun, gpu)
            self._retry_later(gpu)

    async def _exec(
        self, worker_id: str, argv: list[str], env: dict[str, str], preexec: Callable[[], None] | None,
        first_line: bytes = b"",
    ) -> tuple[asyncio.subprocess.Process, socket.socket]:
        """Start a worker with its end of a socket pair as its stdin (`first_line`
        waiting there: nothing of its channel on the command line, where a command
        could read it in /proc) and its output to its log; the runtime's end
        comes back with it. Raises OSError, leaving nothing open."""
        runtime_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        if first_line:
            runtime_end.sendall(first_line)
        log_file = self._log_of(worker_id).open("ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=worker_end.fileno(), stdout=log_file, stderr=log_file, cwd="/", env=env,
                start_new_session=True, preexec_fn=preexec,
            )
        except OSError:
            runtime_end.close()
            raise
        finally:
            worker_end.close()
            log_file.close()
        return proc, runtime_end

    def _log_of(self, worker_id: str) -> Path:
        return self._log_dir / f"{worker_id}.log"

    def _retire(self, worker: W, reason: str, cause: str = "", replace: bool = True, backoff: bool = False) -> None:
        """End a worker and its tree; replace it (after a pause with `backoff`)."""
        if worker.state == RETIRED:
            return
        worker.state = RETIRED
        self.workers.pop(worker.id, None)
        again = replace and not self._closing
        self._announce_retired(worker, cause, reason, again)
        self._spawn(self._bury(worker))
        if again:
            if backoff:
                self._retry_later(worker.gpu)
            else:
                self._replace(worker.gpu)

    def _retry_later(self, gpu: int) -> None:
        """A GPU whose workers fail to start is retried with growing pauses."""
        if self._closing:
            return
        asyncio.get_running_loop().call_later(
            retry_delay(self._failures[gpu]), lambda: None if self._closing else self._replace(gpu)
        )

    def _kill(self, worker: W) -> None:
        process_tree.kill_tree(worker.pid, worker.id, worker.cgroup)

    def _buried(self, worker: W) -> None:
        """What the mode gives back once a worker has ended (its uid, a descriptor)."""

    async def _bury(self, worker: W) -> None:
        self._kill(worker)
        try:
            await asyncio.wait_for(asyncio.shield(worker.exited), BURY_WAIT_S)
        except TimeoutError:
            self._log.warning("%s %s did not exit after SIGKILL", self._noun, worker.id)
        worker.writer.close()
        if worker.cgroup is not None:
            await asyncio.to_thread(cgroups.kill_and_remove, worker.cgroup)
        self._buried(worker)
        worker_logs.prune(self._log_dir, self._logs_start, set(self.workers))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def retry_delay(failures: int) -> float:
    """The pause before a GPU's next start after `failures` failed ones in a row:
    doubling from RETRY_BASE_S, never over RETRY_MAX_S."""
    return min(RETRY_MAX_S, RETRY_BASE_S * 2.0 ** max(0, failures - 1))
