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
(commands/worker_logs.py).

The zygote itself is not a tenant: it never uses the GPU, takes no slot and
is never frozen. Its children are, each as its own command
(commands/forked_process.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.commands import worker_logs
from krex_runtime.commands.command_process import child_setup
from krex_runtime.commands.context_process import describe_exit
from krex_runtime.commands.environment import TenantSetup
from krex_runtime.commands.forked_process import ZygoteLink
from krex_runtime.host import cgroups, process_tree
from krex_runtime.node.access import RunAs
from krex_runtime.node.config import PoolSection
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.tenant.worker_link import ZYGOTE_MESSAGES, LinkError, Verifier, hello, new_key
from krex_runtime.wire import events

log = logging.getLogger("krex.zygote")

LINE_LIMIT = 1 << 20
RETRY_BASE_S = 0.5
RETRY_MAX_S = 30.0


@dataclass
class ZygoteProcess:
    link: ZygoteLink
    gpu: int
    cgroup: Path | None
    proc: asyncio.subprocess.Process
    sock: socket.socket
    writer: asyncio.StreamWriter
    state: str = "starting"  # starting | ready | failed | stopped
    # One message at a time: its first bytes carry the descriptors, the rest
    # follows through the stream, and another message must not come between.
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def id(self) -> str:
        return self.link.id

    @property
    def pid(self) -> int:
        return self.proc.pid

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


class Zygotes:
    def __init__(
        self, settings: PoolSection, gpus: list[Gpu], sink: EventSink, setup: TenantSetup, log_dir: Path,
        on_change: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.gpus = {g.index: g for g in gpus}
        self.current: dict[int, ZygoteProcess] = {}
        self.refusal: dict[int, str] = {}  # GPU -> why its zygote cannot serve (final)
        self._emit = sink.emit
        self._setup = setup
        self._log_dir = log_dir
        self._on_change = on_change  # the dispatcher's: queued forked commands may start, or fail
        self._failures: dict[int, int] = {g.index: 0 for g in gpus}
        self._ids = itertools.count(1)
        self._nonce = secrets.token_hex(2)
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- the dispatcher's view ------------------------------------------------

    def start(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        worker_logs.prune(self._log_dir, "zygote-", set())
        for gpu in self.gpus:
            self._spawn(self._start(gpu))

    def ready(self, gpu: int) -> ZygoteLink | None:
        z = self.current.get(gpu)
        return z.link if z is not None and z.state == "ready" else None

    def refused(self, gpu: int | None) -> str:
        """Why forked commands cannot run on `gpu` (None: on any GPU); "" when they can."""
        if gpu is not None:
            return self.refusal.get(gpu, "")
        if self.refusal and len(self.refusal) == len(self.gpus):
            return next(iter(self.refusal.values()))
        return ""

    def is_zygote(self, command_id: str) -> bool:
        """Whether a process's KREX_COMMAND_ID names one of the zygotes (a forked
        child keeps its zygote's start-up environment in /proc)."""
        return command_id.startswith(f"zygote-{self._nonce}-")

    def command_of(self, pid: int) -> str:
        """The forked command process `pid` belongs to ("" when none)."""
        for z in list(self.current.values()):
            for command_id, run in list(z.link.runs.items()):
                if run.pid is not None and process_tree.contains(run.pid, run.spec.cgroup, pid):
                    return command_id
        return ""

    def stop_replacing(self) -> None:
        self._closing = True

    async def shutdown(self) -> None:
        self._closing = True
        for z in list(self.current.values()):
            self._retire(z, "runtime stopping")
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=30)

    # --- life of a zygote ---------------------------------------------------------

    async def _start(self, gpu_index: int) -> None:
        try:
            await self._start_one(gpu_index)
        except Exception:  # one failed start must not stop forked mode for good
            log.exception("starting the zygote of GPU %d", gpu_index)
            self._retry_later(gpu_index)

    async def _start_one(self, gpu_index: int) -> None:
        if self._closing:
            return
        gpu = self.gpus[gpu_index]
        zygote_id = f"zygote-{self._nonce}-g{gpu_index}-{next(self._ids)}"
        slice_ = self._setup.cgroups
        cgroup = slice_.create(zygote_id) if slice_ is not None else None
        runtime_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Its channel is its stdin and its first line (the spec and its key):
        # nothing of it on the command line.
        key = new_key()
        runtime_end.sendall(hello(key, {"preload": list(self.settings.preload)}))
        log_file = (self._log_dir / f"{zygote_id}.log").open("ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", "krex_runtime.tenant.zygote",
                stdin=zygote_end, stdout=log_file, stderr=log_file, cwd="/",
                # Not a tenant: no tenant id, so no region token either; each
                # child gets its own with the command's environment.
                env=self._setup.env.build(zygote_id, None, {}, gpu),
                start_new_session=True,
                preexec_fn=child_setup(cgroup, self._setup.cores_of(gpu_index), self._zygote_run_as()),
            )
        except OSError as exc:
            runtime_end.close()
            if cgroup is not None:
                cgroup.rmdir()
            log.error("cannot start the zygote of GPU %d: %s", gpu_index, exc)
            self._retry_later(gpu_index)
            return
        finally:
            zygote_end.close()
            log_file.close()
        reader, writer = await asyncio.open_unix_connection(sock=runtime_end, limit=LINE_LIMIT)
        writer.transport.set_write_buffer_limits(high=0)  # drain() then waits until all is written
        exited = asyncio.create_task(proc.wait())
        z = ZygoteProcess(ZygoteLink(zygote_id, None, exited), gpu_index, cgroup, proc, runtime_end, writer)
        z.link.send = z.send
        self.current[gpu_index] = z
        first: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._spawn(self._listen(z, reader, first, Verifier(key, ZYGOTE_MESSAGES)))
        exited.add_done_callback(lambda _t: self._on_exit(z))
        self._emit(events.ZygoteStarted(gpu=gpu_index, zygote=zygote_id, pid=proc.pid))
        try:
            reply = await asyncio.wait_for(asyncio.shield(first), self.settings.start_timeout_s)
        except TimeoutError:
            reply = None
        if z.state != "starting":
            return  # stopped while it started
        if reply is not None and reply.get("type") == "ready":
            self._failures[gpu_index] = 0
            z.state = "ready"
            self._emit(
                events.ZygoteReady(
                    gpu=gpu_index, zygote=zygote_id, import_s=reply.get("import_s"), modules=list(reply.get("modules", []))
                )
            )
            self._on_change()
            return
        if reply is not None:
            # It imported and checked what it was told to: the same again would fail the same way.
            why = reply.get("reason", "start-up failed")
            self.refusal[gpu_index] = why
            log.error("zygote of GPU %d refused to serve: %s (log: %s)", gpu_index, why, self._log_dir / f"{zygote_id}.log")
            self._retire(z, why, final=True)
            self._on_change()
            return
        why = f"exited during start-up ({describe_exit(exited.result())})" if exited.done() else (
            f"not ready within {self.settings.start_timeout_s:g} s"
        )
        log.warning("zygote of GPU %d failed to start: %s", gpu_index, why)
        self._failures[gpu_index] += 1
        self._retire(z, why, replace=True)

    async def _listen(
        self, z: ZygoteProcess, reader: asyncio.StreamReader, first: asyncio.Future[Any], verifier: Verifier,
    ) -> None:
        why = ""
        try:
            while line := await reader.readline():
                if not line.endswith(b"\n"):
                    break  # EOF inside a line
                msg = verifier.check(line)
                if not first.done():
                    if msg["type"] not in ("ready", "failed"):
                        raise LinkError(f"an unexpected {msg['type']!r} message before it was ready")
                    first.set_result(msg)
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
            self._retire(z, f"misbehaved on its control channel: {why}", replace=True)
        if not first.done():
            first.set_result(None)

    def _on_exit(self, z: ZygoteProcess) -> None:
        if z.state in ("ready", "starting") and not self._closing:
            returncode = z.link.exited.result() if not z.link.exited.cancelled() else None
            if z.state == "ready":
                self._retire(z, f"zygote exited ({describe_exit(returncode)})", replace=True)

    def _retire(self, z: ZygoteProcess, reason: str, replace: bool = False, final: bool = False) -> None:
        if z.state in ("failed", "stopped"):
            return
        z.state = "failed" if final else "stopped"
        if self.current.get(z.gpu) is z:
            del self.current[z.gpu]
        again = replace and not self._closing
        if final:
            self._emit(events.ZygoteFailed(gpu=z.gpu, zygote=z.id, reason=reason))
        else:
            self._emit(events.ZygoteStopped(gpu=z.gpu, zygote=z.id, reason=reason, restarting=again))
        self._spawn(self._bury(z))
        if again:
            self._retry_later(z.gpu)

    def _zygote_run_as(self) -> RunAs | None:
        """With a uid per tenant the zygote keeps the runtime's uid, so that each
        child can become its command's uid (tenant/forked_child.py) before it
        runs anything of the command; the zygote itself runs no tenant code."""
        run_as = self._setup.run_as
        if self._setup.identities is not None and run_as is not None:
            return RunAs(None, run_as.umask)
        return run_as

    def _retry_later(self, gpu: int) -> None:
        if self._closing:
            return
        delay = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** max(0, self._failures[gpu] - 1))
        asyncio.get_running_loop().call_later(delay, lambda: None if self._closing else self._spawn(self._start(gpu)))

    async def _bury(self, z: ZygoteProcess) -> None:
        # Its children are in their own cgroups (or carry its id, without cgroups): ending
        # the zygote's tree ends only the zygote there, and its forks here.
        process_tree.kill_tree(z.pid, z.id, z.cgroup)
        try:
            await asyncio.wait_for(asyncio.shield(z.link.exited), 10)
        except TimeoutError:
            log.warning("zygote %s did not exit after SIGKILL", z.id)
        z.writer.close()
        if z.cgroup is not None:
            await asyncio.to_thread(cgroups.kill_and_remove, z.cgroup)
        worker_logs.prune(self._log_dir, "zygote-", {z.id for z in self.current.values()})

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
