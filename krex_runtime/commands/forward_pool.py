"""Per-GPU pools of context servers for forwarded commands (docs/modes.md,
"Forwarded mode").

A context server (native/src/forward/server.c, `krex-ctxd`) owns a live
CUDA context and executes the driver calls of one forwarded command at a
time, sent by the command's forwarding libcuda.so.1 over a shared-memory
segment (commands/forward_ring.py). It is not a tenant: the command is (its
own process, cgroup, gate entries and region token; its calls pass its gate
before they leave it). The server has no interception library, no cgroup
and no gate entries, and is never frozen: while its command is held back,
nothing reaches it.

Life of a server: started with its control socket as stdin, it creates its
context and says `ready`; per command the pool sends `serve <tenant> <ring
bytes> <staging bytes>` with the segment's descriptor (`serving` back), then `end` once the command's
processes have ended; the server frees what the command left and answers
`clean ok` or `clean retire <reason>`. It is replaced when it retires, when
it refuses a request (`failed`: a malformed or oversized request), when it
dies, when it does not answer `end` within `forward.clean_timeout_s`, and
after `forward.max_commands` commands. Only the server's own lines are read
from its channel: the command never holds its descriptor.

A server serves one tenant after another, so it runs as no uid a tenant can
be given (`TenantSetup.server_run_as`: the runtime's own user or
`forward.server_user`): handing a tenant's uid out or back, which kills
whatever still runs as it, never reaches a server, and no command can signal
one. One that dies while idle (its pidfd says so) is retired and replaced at
once, and never handed to a command.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import select
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.commands import worker_logs
from krex_runtime.commands.command_process import child_setup
from krex_runtime.commands.environment import TenantSetup
from krex_runtime.commands.forward_ring import Segment
from krex_runtime.node.config import ForwardSection
from krex_runtime.node.gpus import Gpu

log = logging.getLogger("krex.forward")
RETRY_BASE_S, RETRY_MAX_S = 0.5, 30.0


@dataclass
class ContextServer:
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
    lines: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    failure: str = ""  # what it said when it refused a request of its command
    pidfd: int = -1  # readable once the process has ended (never another process of a reused pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        """Its process still runs: asked of the kernel, not of what the pool last heard."""
        if self.exited.done():
            return False
        if self.pidfd < 0:
            return True
        ended = select.poll()
        ended.register(self.pidfd, select.POLLIN)
        return not ended.poll(0)


class ForwardPool:
    def __init__(
        self, settings: ForwardSection, kill_grace_s: float, gpus: list[Gpu], setup: TenantSetup, log_dir: Path,
        server_path: Path, on_idle: Callable[[], None], segment_prefix: str,
    ) -> None:
        self.settings = settings
        self.segment_prefix = segment_prefix  # forward_ring.segment_prefix of the run folder
        self.kill_grace_s = kill_grace_s
        self.gpus = {g.index: g for g in gpus}
        self.servers: dict[str, ContextServer] = {}
        self._setup = setup
        self._log_dir = log_dir
        self._server_path = server_path
        self._on_idle = on_idle
        self._nonce = secrets.token_hex(2)
        self._ids = itertools.count(1)
        self._failures: dict[int, int] = {g.index: 0 for g in gpus}
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._context_turn = asyncio.Lock()  # contexts are created one at a time, node-wide

    # --- the dispatcher's view ------------------------------------------------

    def start(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        worker_logs.prune(self._log_dir, "fwd-", set())
        for _ in range(self.settings.servers_per_gpu):
            for gpu in self.gpus:
                self._spawn(self._start_server(gpu))

    def has_idle(self, gpu: int) -> bool:
        return bool(self._idle(gpu))

    def take(self, gpu: int, command_id: str) -> ContextServer:
        server = min(self._idle(gpu), key=lambda s: s.served)
        server.state, server.job_id = "busy", command_id
        return server

    def _idle(self, gpu: int) -> list[ContextServer]:
        """The GPU's idle servers that still live; a dead one is retired (and
        replaced) here, before a command could be given it."""
        idle = []
        for server in [s for s in self.servers.values() if s.gpu == gpu and s.state == "idle"]:
            if server.alive():
                idle.append(server)
            else:
                self._retire(server, "died while idle")
        return idle

    def is_server_pid(self, pid: int) -> bool:
        """Known by pid: a server is not dumpable, so its /proc environment is not readable."""
        return any(s.pid == pid for s in self.servers.values())

    def job_of_pid(self, pid: int) -> str | None:
        """The command the context server `pid` serves now, until it has put
        its context back (by its pid, never its environment)."""
        for server in self.servers.values():
            if server.pid == pid and server.state in ("busy", "cleaning"):
                return server.job_id
        return None

    async def shutdown(self) -> None:
        self._closing = True
        for server in list(self.servers.values()):
            self._retire(server, "runtime stopping", replace=False)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=30)

    # --- serving one command --------------------------------------------------

    async def serve(self, server: ContextServer, segment: Segment, tenant_id: int) -> str:
        """Hand the command's segment to its server; "" once it serves, else why not."""
        try:
            line = f"serve {tenant_id} {segment.ring_size} {segment.staging_size}\n"
            socket.send_fds(server.sock, [line.encode()], [segment.fd])
        except OSError as exc:
            self._retire(server, f"unreachable: {exc}")
            return f"its context server is unreachable: {exc}"
        line = await self._next_line(server, self.settings.start_timeout_s)
        if line == "serving":
            return ""
        why = f"its context server did not start serving ({line or 'no answer'})"
        self._retire(server, why)
        return why

    async def release(self, server: ContextServer, segment: Segment) -> str:
        """After the command's processes have ended: the server puts its
        context back (or retires). Returns what the server said of a request
        of the command it refused ("" when none), and removes the segment."""
        try:
            if server.state == "busy" and not server.exited.done():
                server.state = "cleaning"
                try:
                    server.writer.write(b"end\n")
                    await server.writer.drain()
                except OSError as exc:
                    self._retire(server, f"unreachable after its command: {exc}")
                    return server.failure
                while True:
                    line = await self._next_line(server, self.settings.clean_timeout_s)
                    if line is None:
                        why = ("died after its command" if server.exited.done()
                               else f"no cleanup report within {self.settings.clean_timeout_s:g} s")
                        self._retire(server, why)
                        break
                    if line.startswith("failed "):
                        server.failure = line[len("failed "):]
                        continue
                    if line.startswith("clean ok"):
                        server.served += 1
                        if server.served >= self.settings.max_commands:
                            self._retire(server, f"served {server.served} commands")
                        else:
                            server.state, server.job_id = "idle", None
                            self._on_idle()
                        break
                    self._retire(server, line.removeprefix("clean retire ") if line.startswith("clean retire ")
                                 else f"an unexpected line after its command: {line[:80]!r}")
                    break
            elif server.state != "retired":
                self._retire(server, "ended with its command")
            return server.failure
        finally:
            segment.remove()

    def died_while_serving(self, server: ContextServer) -> str:
        """Why the command's server stopped while it ran ("" while it lives)."""
        if not server.exited.done():
            return ""
        return f"its context server (pid {server.pid}) died while the command ran ({describe(server.exited.result())})"

    # --- starting and retiring servers ---------------------------------------------

    def _server_env(self, server_id: str, gpu: Gpu) -> dict[str, str]:
        """The GPU's tenant environment, as a process of the runtime's: no
        interception library (the command is the tenant), no region token."""
        env = self._setup.env.build(server_id, None, {}, gpu)
        library = self._setup.env.library
        if library is not None:
            kept = [p for p in env.get("LD_PRELOAD", "").split(" ") if p and p != str(library)]
            env["LD_PRELOAD"] = " ".join(kept)
        return env

    async def _start_server(self, gpu_index: int) -> None:
        if self._closing:
            return
        gpu = self.gpus[gpu_index]
        server_id = f"fwd-{self._nonce}-g{gpu_index}-{next(self._ids)}"
        runtime_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log_file = (self._log_dir / f"{server_id}.log").open("ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                str(self._server_path), stdin=server_end, stdout=log_file, stderr=log_file, cwd="/",
                env=self._server_env(server_id, gpu), start_new_session=True,
                preexec_fn=child_setup(None, self._setup.cores_of(gpu_index), self._setup.server_run_as),
            )
        except OSError as exc:
            runtime_end.close()
            log.error("cannot start a context server on GPU %d: %s", gpu_index, exc)
            self._retry_later(gpu_index)
            return
        finally:
            server_end.close()
            log_file.close()
        reader, writer = await asyncio.open_unix_connection(sock=runtime_end)
        server = ContextServer(server_id, gpu_index, proc, runtime_end, reader, writer,
                               asyncio.create_task(proc.wait()), pidfd=_pidfd(proc.pid))
        self.servers[server_id] = server
        server.exited.add_done_callback(lambda _: self._ended(server))
        self._spawn(self._listen(server))
        async with self._context_turn:
            line = await self._next_line(server, self.settings.start_timeout_s)
        if server.state != "warming":
            return
        if line is not None and line.startswith("ready"):
            self._failures[gpu_index] = 0
            server.state = "idle"
            log.info("context server %s (pid %d) ready on GPU %d: %s", server_id, proc.pid, gpu_index, line)
            self._on_idle()
            return
        self._failures[gpu_index] += 1
        why = line or ("exited during start-up" if server.exited.done() else "not ready in time")
        log.warning("context server %s on GPU %d failed to start: %s", server_id, gpu_index, why)
        self._retire(server, f"start failed: {why}", retry=True)

    def _ended(self, server: ContextServer) -> None:
        """Its process ended: one that was idle is replaced now, not when a
        command is given it (a busy one's command learns it: forward_launch.py)."""
        if server.state == "idle":
            code = None if server.exited.cancelled() else server.exited.result()
            self._retire(server, f"died while idle ({describe(code)})")

    async def _listen(self, server: ContextServer) -> None:
        try:
            while line := await server.reader.readline():
                server.lines.put_nowait(line.decode("utf-8", "replace").rstrip("\n"))
        except (ConnectionError, ValueError):
            pass
        server.lines.put_nowait(None)

    async def _next_line(self, server: ContextServer, timeout_s: float) -> str | None:
        try:
            return await asyncio.wait_for(server.lines.get(), timeout_s)
        except TimeoutError:
            return None

    def _retire(self, server: ContextServer, reason: str, replace: bool = True, retry: bool = False) -> None:
        if server.state == "retired":
            return
        server.state = "retired"
        self.servers.pop(server.id, None)
        log.info("context server %s of GPU %d retired: %s", server.id, server.gpu, reason)
        self._spawn(self._bury(server))
        if replace and not self._closing:
            if retry:
                self._retry_later(server.gpu)
            else:
                self._spawn(self._start_server(server.gpu))

    def _retry_later(self, gpu: int) -> None:
        delay = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** max(0, self._failures[gpu] - 1))
        asyncio.get_running_loop().call_later(delay, lambda: None if self._closing else self._spawn(self._start_server(gpu)))

    async def _bury(self, server: ContextServer) -> None:
        if not server.exited.done():
            try:
                os.kill(server.pid, 9)
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(asyncio.shield(server.exited), 10)
        except TimeoutError:
            log.warning("context server %s did not exit after SIGKILL", server.id)
        server.writer.close()
        if server.pidfd >= 0:
            os.close(server.pidfd)
            server.pidfd = -1
        worker_logs.prune(self._log_dir, "fwd-", set(self.servers))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _pidfd(pid: int) -> int:
    """A pidfd of the server just started (-1 where the kernel has none: its exit is then seen by waitpid alone)."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return -1


def describe(returncode: int | None) -> str:
    if returncode is None:
        return "unknown status"
    return f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
