"""Per-GPU pools of context servers for forwarded commands (docs/modes.md,
"Forwarded mode").

A context server (native/src/forward/server.c, `krex-ctxd`) owns a live
CUDA context and executes the driver calls of one forwarded command at a
time, sent by the command's forwarding libcuda.so.1 over a shared-memory
segment (forward_ring.py). It is not a tenant: the command is (its
own process, cgroup, gate entries and region token; its calls pass its gate
before they leave it). The server has no interception library, no cgroup
and no gate entries, and is never frozen: while its command is held back,
nothing reaches it.

Life of a server: started with its control socket as stdin, it creates its
context and says `ready`; per command the pool sends `serve <tenant> <ring
bytes> <staging bytes> <pinned bytes>` with the segment's descriptor and its
pinned arena's (`serving` back), then `end` once the command's
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
import logging
import os
import select
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from krex_runtime.commands.environment import TenantSetup
from krex_runtime.commands.forwarded.forward_ring import Segment
from krex_runtime.commands.launch import child_setup
from krex_runtime.commands.workers.worker_pool import ChannelWorker, WorkerPool
from krex_runtime.node.config import ForwardSection
from krex_runtime.node.gpus import Gpu

log = logging.getLogger("krex.forward")


@dataclass
class ForwardedWorker(ChannelWorker):
    """A context server: its process, its channel and the command it serves."""

    lines: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    failure: str = ""  # what it said when it refused a request of its command
    pidfd: int = -1  # readable once the process has ended (never another process of a reused pid)
    cgroup: Path | None = None  # a server has none: it is not a tenant

    def alive(self) -> bool:
        """Its process still runs: asked of the kernel, not of what the pool last heard."""
        if self.exited.done():
            return False
        if self.pidfd < 0:
            return True
        ended = select.poll()
        ended.register(self.pidfd, select.POLLIN)
        return not ended.poll(0)


class ForwardedPool(WorkerPool[ForwardedWorker]):
    def __init__(
        self, settings: ForwardSection, kill_grace_s: float, gpus: list[Gpu], setup: TenantSetup, log_dir: Path,
        server_path: Path, ready: Callable[[], None], segment_prefix: str,
    ) -> None:
        super().__init__("fwd", "context server", gpus, log_dir, ready, log)
        self.settings = settings
        self.segment_prefix = segment_prefix  # ring.segment_prefix of the run folder
        self.kill_grace_s = kill_grace_s
        self._setup = setup
        self._server_path = server_path
        self._context_turn = asyncio.Lock()  # contexts are created one at a time, node-wide

    # --- what placing a command asks ------------------------------------------

    def per_gpu(self) -> int:
        return self.settings.servers_per_gpu

    def has_idle(self, gpu: int) -> bool:
        return bool(self._idle(gpu))

    def take(self, gpu: int, command_id: str) -> ForwardedWorker:
        server = min(self._idle(gpu), key=lambda s: s.served)
        server.state, server.job_id = "busy", command_id
        return server

    def _idle(self, gpu: int) -> list[ForwardedWorker]:
        """The GPU's idle servers that still live; a dead one is retired (and
        replaced) here, before a command could be given it."""
        idle = []
        for server in [s for s in self.workers.values() if s.gpu == gpu and s.state == "idle"]:
            if server.alive():
                idle.append(server)
            else:
                self._retire(server, "died while idle")
        return idle

    def acts_for_commands(self, pid: int) -> bool:
        """Known by pid: a server is not dumpable, so its /proc environment is not readable."""
        return any(s.pid == pid for s in self.workers.values())

    def command_of(self, pid: int, command_id: str) -> str | None:
        """The command the context server `pid` serves now, until it has put
        its context back (by its pid, never its environment)."""
        if not self.acts_for_commands(pid):
            return None
        for server in self.workers.values():
            if server.pid == pid and server.state in ("busy", "cleaning") and server.job_id is not None:
                return server.job_id
        return ""

    # --- serving one command --------------------------------------------------

    async def serve(self, server: ForwardedWorker, segment: Segment, tenant_id: int) -> str:
        """Hand the command's segment to its server; "" once it serves, else why not."""
        try:
            request = f"serve {tenant_id} {segment.ring_size} {segment.staging_size} {segment.pinned_size}\n"
            fds = [segment.fd] + ([segment.pinned_fd] if segment.pinned_fd >= 0 else [])
            socket.send_fds(server.sock, [request.encode()], fds)
        except OSError as exc:
            self._retire(server, f"unreachable: {exc}")
            return f"its context server is unreachable: {exc}"
        line = await self._next_line(server, self.settings.start_timeout_s)
        if line == "serving":
            return ""
        why = f"its context server did not start serving ({line or 'no answer'})"
        self._retire(server, why)
        return why

    async def release(self, server: ForwardedWorker, segment: Segment) -> str:
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
                            self._ready()
                        break
                    self._retire(server, line.removeprefix("clean retire ") if line.startswith("clean retire ")
                                 else f"an unexpected line after its command: {line[:80]!r}")
                    break
            elif server.state != "retired":
                self._retire(server, "ended with its command")
            return server.failure
        finally:
            segment.remove()

    def died_while_serving(self, server: ForwardedWorker) -> str:
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

    async def _spawn_worker(self, gpu_index: int) -> ForwardedWorker | None:
        gpu = self.gpus[gpu_index]
        server_id = self._new_id(gpu_index)
        try:
            proc, runtime_end = await self._exec(
                server_id, [str(self._server_path)], self._server_env(server_id, gpu),
                child_setup(None, self._setup.cores_of(gpu_index), self._setup.server_run_as),
            )
        except OSError as exc:
            log.error("cannot start a context server on GPU %d: %s", gpu_index, exc)
            self._retry_later(gpu_index)
            return None
        reader, writer = await asyncio.open_unix_connection(sock=runtime_end)
        server = ForwardedWorker(server_id, gpu_index, proc, runtime_end, reader, writer,
                                 asyncio.create_task(proc.wait()), pidfd=_pidfd(proc.pid))
        self.workers[server_id] = server
        server.exited.add_done_callback(lambda _: self._ended(server))
        self._spawn(self._listen(server))
        return server

    async def _see_ready(self, server: ForwardedWorker) -> None:
        """Its `ready` line, one server creating its context at a time."""
        async with self._context_turn:
            line = await self._next_line(server, self.settings.start_timeout_s)
        if server.state != "warming":
            return
        if line is not None and line.startswith("ready"):
            self._failures[server.gpu] = 0
            server.state = "idle"
            log.info("context server %s (pid %d) ready on GPU %d: %s", server.id, server.pid, server.gpu, line)
            self._ready()
            return
        self._failures[server.gpu] += 1
        why = line or ("exited during start-up" if server.exited.done() else "not ready in time")
        log.warning("context server %s on GPU %d failed to start: %s", server.id, server.gpu, why)
        self._retire(server, f"start failed: {why}", backoff=True)

    def _ended(self, server: ForwardedWorker) -> None:
        """Its process ended: one that was idle is replaced now, not when a
        command is given it (a busy one's command learns it: forwarded_run.py)."""
        if server.state == "idle":
            code = None if server.exited.cancelled() else server.exited.result()
            self._retire(server, f"died while idle ({describe(code)})")

    async def _listen(self, server: ForwardedWorker) -> None:
        try:
            while line := await server.reader.readline():
                server.lines.put_nowait(line.decode("utf-8", "replace").rstrip("\n"))
        except (ConnectionError, ValueError):
            pass
        server.lines.put_nowait(None)

    async def _next_line(self, server: ForwardedWorker, timeout_s: float) -> str | None:
        try:
            return await asyncio.wait_for(server.lines.get(), timeout_s)
        except TimeoutError:
            return None

    def _announce_retired(self, server: ForwardedWorker, cause: str, reason: str, replaced: bool) -> None:
        log.info("context server %s of GPU %d retired: %s", server.id, server.gpu, reason)

    def _kill(self, server: ForwardedWorker) -> None:
        """Its own process only: a server has no tree of its own and no cgroup."""
        if not server.exited.done():
            try:
                os.kill(server.pid, 9)
            except ProcessLookupError:
                pass

    def _buried(self, server: ForwardedWorker) -> None:
        if server.pidfd >= 0:
            os.close(server.pidfd)
            server.pidfd = -1


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
