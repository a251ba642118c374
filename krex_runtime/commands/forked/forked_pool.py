"""Per-GPU zygotes: the preloaded parents that forked-mode commands are forked from.

A zygote (krex_runtime/tenant/zygote.py) is started like a context process:
its GPU's tenant environment with the interception library preloaded, a
cgroup of its own, the GPU's cores and the tenants' user. It imports
`pool.preload` once, without touching CUDA, and refuses to serve when a
module leaves it unsafe to fork (a thread started, the driver initialised):
that refusal is final, it says which module and why, and forked commands are
then refused with the same words. A zygote that dies is started again, with
growing pauses if it keeps failing; the commands it had forked fail and
their trees are ended. So does one that misbehaves on its channel: a line it
did not sign, one that is not one of its messages, well formed
(tenant/worker_link.py). Its logs are pruned like the context processes'
(commands/workers/logs.py).

The zygote itself is not a tenant: it never uses the GPU, takes no slot and
is never frozen. Its children are, each as its own command
(forked_run.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.commands.environment import TenantSetup
from krex_runtime.commands.forked.forked_run import ForkedWorkerLink
from krex_runtime.commands.launch import child_setup, describe_exit
from krex_runtime.commands.workers.worker_pool import WorkerPool
from krex_runtime.host import process_tree
from krex_runtime.node.access import RunAs
from krex_runtime.node.config import PoolSection
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.tenant.worker_link import ZYGOTE_MESSAGES, LinkError, Verifier, hello, new_key
from krex_runtime.wire.state import events

log = logging.getLogger("krex.zygote")

LINE_LIMIT = 1 << 20
REFUSED = "refused"  # the cause of a zygote's final retirement: it refused to serve


@dataclass
class ForkedWorker:
    """A zygote: its process and channel; `link` is what its forked runs hold of it."""

    link: ForkedWorkerLink
    gpu: int
    cgroup: Path | None
    proc: asyncio.subprocess.Process
    sock: socket.socket
    writer: asyncio.StreamWriter
    state: str = "starting"  # starting | ready | retired
    # One message at a time: its first bytes carry the descriptors, the rest
    # follows through the stream, and another message must not come between.
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Its first word, `ready` or `failed` (None: it ended or misbehaved first).
    first: asyncio.Future[dict[str, Any] | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def id(self) -> str:
        return self.link.id

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exited(self) -> asyncio.Task[int]:
        return self.link.exited

    async def send(self, msg: dict[str, Any], fds: list[int]) -> None:
        data = json.dumps(msg).encode() + b"\n"
        async with self.sending:
            # Whatever an earlier message left in the writer's buffer goes first
            # (its buffer limit is 0, so drain waits until it is empty).
            await self.writer.drain()
            # The descriptors travel with the first bytes; the zygote reads the
            # whole line before it acts, so the rest may follow through the stream.
            while True:
                try:
                    sent = socket.send_fds(self.sock, [data[:4096]], fds)
                    break
                except BlockingIOError:
                    # The zygote has not read what came before yet (its socket
                    # buffer is full): the transport cannot wait on this socket
                    # for us, so look again shortly.
                    if self.link.exited.done():
                        raise ConnectionError("the zygote exited") from None
                    await asyncio.sleep(0.002)
            if sent < len(data):
                self.writer.write(data[sent:])
                await self.writer.drain()


class ForkedPool(WorkerPool[ForkedWorker]):
    def __init__(
        self, settings: PoolSection, gpus: list[Gpu], sink: EventSink, setup: TenantSetup, log_dir: Path,
        ready: Callable[[], None],
    ) -> None:
        # `ready` also when a zygote refuses: the commands waiting for it fail.
        super().__init__("zygote", "zygote", gpus, log_dir, ready, log)
        self.settings = settings
        self.refusal: dict[int, str] = {}  # GPU -> why its zygote cannot serve (final)
        self._emit = sink.emit
        self._setup = setup

    # --- what placing a command asks ------------------------------------------

    def per_gpu(self) -> int:
        return 1

    def ready(self, gpu: int) -> ForkedWorkerLink | None:
        z = self._of(gpu)
        return z.link if z is not None and z.state == "ready" else None

    def refused(self, gpu: int | None) -> str:
        """Why forked commands cannot run on `gpu` (None: on any GPU); "" when they can."""
        if gpu is not None:
            return self.refusal.get(gpu, "")
        if self.refusal and len(self.refusal) == len(self.gpus):
            return next(iter(self.refusal.values()))
        return ""

    def command_of(self, pid: int, command_id: str) -> str | None:
        """A forked child keeps its zygote's start-up environment in /proc: it is
        the forked command whose tree holds it ("" when none)."""
        if not command_id.startswith(self._ids_start):
            return None
        for z in list(self.workers.values()):
            for run_id, run in list(z.link.runs.items()):
                if run.pid is not None and process_tree.contains(run.pid, run.spec.cgroup, pid):
                    return run_id
        return ""

    def _of(self, gpu: int) -> ForkedWorker | None:
        return next((z for z in self.workers.values() if z.gpu == gpu), None)

    # --- life of a zygote ---------------------------------------------------------

    async def _spawn_worker(self, gpu_index: int) -> ForkedWorker | None:
        gpu = self.gpus[gpu_index]
        zygote_id = self._new_id(gpu_index)
        slice_ = self._setup.cgroups
        cgroup = slice_.create(zygote_id) if slice_ is not None else None
        key = new_key()
        try:
            proc, runtime_end = await self._exec(
                zygote_id, [sys.executable, "-P", "-m", "krex_runtime.tenant.zygote"],
                # Not a tenant: no tenant id, so no region token either; each
                # child gets its own with the command's environment.
                self._setup.env.build(zygote_id, None, {}, gpu),
                child_setup(cgroup, self._setup.cores_of(gpu_index), self._zygote_run_as()),
                first_line=hello(key, {"preload": list(self.settings.preload)}),
            )
        except OSError as exc:
            if cgroup is not None:
                cgroup.rmdir()
            log.error("cannot start the zygote of GPU %d: %s", gpu_index, exc)
            self._retry_later(gpu_index)
            return None
        reader, writer = await asyncio.open_unix_connection(sock=runtime_end, limit=LINE_LIMIT)
        writer.transport.set_write_buffer_limits(high=0)  # drain() then waits until all is written
        exited = asyncio.create_task(proc.wait())
        z = ForkedWorker(ForkedWorkerLink(zygote_id, None, exited), gpu_index, cgroup, proc, runtime_end, writer)
        z.link.send = z.send
        self.workers[zygote_id] = z
        self._spawn(self._listen(z, reader, Verifier(key, ZYGOTE_MESSAGES)))
        exited.add_done_callback(lambda _t: self._on_exit(z))
        self._emit(events.ZygoteStarted(gpu=gpu_index, zygote=zygote_id, pid=proc.pid))
        return z

    async def _see_ready(self, z: ForkedWorker) -> None:
        """Its first word: ready, a final refusal, or nothing in time (tried again later)."""
        try:
            reply = await asyncio.wait_for(asyncio.shield(z.first), self.settings.start_timeout_s)
        except TimeoutError:
            reply = None
        if z.state != "starting":
            return  # stopped while it started
        if reply is not None and reply.get("type") == "ready":
            self._failures[z.gpu] = 0
            z.state = "ready"
            self._emit(
                events.ZygoteReady(
                    gpu=z.gpu, zygote=z.id, import_s=reply.get("import_s"), modules=list(reply.get("modules", []))
                )
            )
            self._ready()
            return
        if reply is not None:
            # It imported and checked what it was told to: the same again would fail the same way.
            why = reply.get("reason", "start-up failed")
            self.refusal[z.gpu] = why
            log.error("zygote of GPU %d refused to serve: %s (log: %s)", z.gpu, why, self._log_of(z.id))
            self._retire(z, why, REFUSED, replace=False)
            self._ready()
            return
        why = f"exited during start-up ({describe_exit(z.exited.result())})" if z.exited.done() else (
            f"not ready within {self.settings.start_timeout_s:g} s"
        )
        log.warning("zygote of GPU %d failed to start: %s", z.gpu, why)
        self._failures[z.gpu] += 1
        self._retire(z, why, backoff=True)

    async def _listen(self, z: ForkedWorker, reader: asyncio.StreamReader, verifier: Verifier) -> None:
        why = ""
        try:
            while line := await reader.readline():
                if not line.endswith(b"\n"):
                    break  # EOF inside a line
                msg = verifier.check(line)
                if not z.first.done():
                    if msg["type"] not in ("ready", "failed"):
                        raise LinkError(f"an unexpected {msg['type']!r} message before it was ready")
                    z.first.set_result(msg)
                elif msg["type"] in ("ready", "failed"):
                    raise LinkError(f"a second {msg['type']!r} message")
                else:
                    z.link.deliver(msg)  # one about a run that ended already (a late report) is dropped
        except LinkError as exc:
            why = str(exc)
        except ValueError:
            why = "a line over the length limit"
        except ConnectionError:
            pass
        if why:
            log.warning("zygote %s misbehaved on its control channel: %s", z.id, why)
            if z.state == "starting":
                self._failures[z.gpu] += 1
            self._retire(z, f"misbehaved on its control channel: {why}", backoff=True)
        if not z.first.done():
            z.first.set_result(None)

    def _on_exit(self, z: ForkedWorker) -> None:
        if z.state == "ready" and not self._closing:
            returncode = z.exited.result() if not z.exited.cancelled() else None
            self._retire(z, f"zygote exited ({describe_exit(returncode)})", backoff=True)

    def _announce_retired(self, z: ForkedWorker, cause: str, reason: str, replaced: bool) -> None:
        if cause == REFUSED:
            self._emit(events.ZygoteFailed(gpu=z.gpu, zygote=z.id, reason=reason))
        else:
            self._emit(events.ZygoteStopped(gpu=z.gpu, zygote=z.id, reason=reason, restarting=replaced))

    def _zygote_run_as(self) -> RunAs | None:
        """With a uid per tenant the zygote keeps the runtime's uid, so that each
        child can become its command's uid (tenant/forked_child.py) before it
        runs anything of the command; the zygote itself runs no tenant code."""
        run_as = self._setup.run_as
        if self._setup.identities is not None and run_as is not None:
            return RunAs(None, run_as.umask)
        return run_as
