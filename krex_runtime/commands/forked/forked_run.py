"""Running one forked-mode command: forked by its GPU's zygote, followed like a process.

From outside a forked command is a process command: its own session and
cgroup, output through pipes to files and attached clients, the same time
limit, cancel and end of the whole tree, the same exit codes and signals. What
differs is who starts it. The runtime hands the zygote the write ends of the
output pipes and the read end of a go pipe (SCM_RIGHTS); the zygote forks and
reports the child's pid; the runtime moves the child into the command's
cgroup, then writes the go byte, and only then does the child run the
command. The child is the zygote's child, so its exit status comes from the
zygote (`exited`, the raw wait status); when the zygote itself dies, the
command fails and its tree is ended.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.commands.launch import LaunchSpec, Outcome, describe_exit, outcome_of, signal_of
from krex_runtime.commands.output import READER_DRAIN_TIMEOUT_S, OutputSink, pipe_reader, pump_output
from krex_runtime.host import cgroups, process_tree

EXIT_REPORT_TIMEOUT_S = 10.0  # after SIGKILL of its tree, how long the zygote may take to report


@dataclass
class ForkedWorkerLink:
    """What a forked run needs of its zygote: its channel and its life."""

    id: str
    send: Any  # async (msg, fds) -> None
    exited: asyncio.Task[int]
    runs: dict[str, ForkedRun] = field(default_factory=dict)

    def deliver(self, msg: dict[str, Any]) -> None:
        run = self.runs.get(msg.get("id") or "")
        if run is not None:
            run.deliver(msg)


class ForkedRun:
    """A forked command while it runs: what the dispatcher holds as `job.process`."""

    def __init__(self, spec: LaunchSpec, entry: dict[str, Any], zygote: ForkedWorkerLink, sink: OutputSink) -> None:
        self.spec = spec
        self.entry = entry
        self.zygote = zygote
        self.pid: int | None = None
        self._sink = sink
        self._cancel = asyncio.Event()
        self._cancel_reason = ""
        loop = asyncio.get_running_loop()
        self._forked: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._exited: asyncio.Future[int] = loop.create_future()
        self._readers: list[asyncio.Task[None]] = []

    def cancel(self, reason: str) -> None:
        self._cancel_reason = reason
        self._cancel.set()

    def deliver(self, msg: dict[str, Any]) -> None:
        """A message of the zygote about this command."""
        kind = msg.get("type")
        if kind in ("forked", "fork_failed") and not self._forked.done():
            self._forked.set_result(msg)
        elif kind == "exited" and not self._exited.done():
            self._exited.set_result(os.waitstatus_to_exitcode(int(msg["status"])))

    async def start(self) -> Outcome | None:
        """Have the zygote fork the child and place it; an Outcome when it could not."""
        spec = self.spec
        unusable = _cwd_problem(spec.cwd)
        if unusable:
            return Outcome("failed", 127, None, f"cannot start: {unusable}: {spec.cwd}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        go_r, go_w = os.pipe()
        self.zygote.runs[spec.command_id] = self
        msg = {"type": "fork", "id": spec.command_id, "entry": self.entry, "cwd": spec.cwd, "env": spec.env}
        user = spec.run_as.user if spec.run_as is not None else None
        if user is not None and spec.run_as is not None and spec.run_as.groups:  # a uid of its own (identities)
            msg["identity"] = {"uid": user.uid, "gid": user.gid, "groups": list(spec.run_as.groups),
                               "umask": spec.run_as.umask}
        try:
            await self.zygote.send(msg, [out_w, err_w, go_r])
        except OSError as exc:
            for fd in (out_r, err_r, go_w):
                os.close(fd)
            return self._gone(f"cannot start: its zygote is unreachable: {exc}")
        finally:
            for fd in (out_w, err_w, go_r):
                os.close(fd)
        self._readers = [
            asyncio.create_task(pump_output(await pipe_reader(out_r), "stdout", spec.stdout_path, self._sink, spec.loss)),
            asyncio.create_task(pump_output(await pipe_reader(err_r), "stderr", spec.stderr_path, self._sink, spec.loss)),
        ]
        first: set[asyncio.Future[Any]] = {self._forked, self.zygote.exited}
        done, _ = await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        reply = self._forked.result() if self._forked in done else None
        if reply is None or reply.get("type") != "forked":
            os.close(go_w)
            await self._drain()
            why = reply.get("reason", "") if reply is not None else f"its zygote ended ({self._zygote_exit()})"
            return self._gone(f"cannot start: {why}")
        self.pid = int(reply["pid"])
        placed = self._place()
        try:
            if not placed:
                os.write(go_w, b"g")
        except OSError as exc:
            placed = f"cannot let it run: {exc.strerror}"
        finally:
            os.close(go_w)  # without the go byte the child exits at once (125)
        if placed:
            await self._end_tree()
            await self._drain()
            return self._gone(f"cannot start: {placed}")
        return None

    def _place(self) -> str:
        """Move the child into the command's cgroup before it runs anything ("" or why not)."""
        if self.spec.cgroup is None:
            return ""
        try:
            with open(self.spec.cgroup / "cgroup.procs", "w") as f:
                f.write(str(self.pid))
        except OSError as exc:
            return f"cannot place it in its cgroup {self.spec.cgroup}: {exc.strerror}"
        return ""

    async def wait(self) -> Outcome:
        """Run to the end: exit, time limit or cancel, then end the whole tree."""
        spec = self.spec
        assert self.pid is not None
        cancelled = asyncio.create_task(self._cancel.wait())
        ends: set[asyncio.Future[Any]] = {self._exited, cancelled, self.zygote.exited}
        done, _ = await asyncio.wait(ends, timeout=spec.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if self._exited in done:  # the zygote's word: the child itself ended, whatever holds its pipes
            outcome = outcome_of(self._exited.result())
            pid = self.pid
            await process_tree.leftovers_grace(
                lambda: process_tree.alive(pid, spec.command_id, spec.cgroup), spec.orphan_grace_s, self._cancel
            )
        elif cancelled in done:
            returncode = await self._end_tree()
            outcome = Outcome("cancelled", None, signal_of(returncode), self._cancel_reason)
        elif self.zygote.exited in done:
            await self._end_tree()
            outcome = Outcome("failed", None, None, f"its zygote ended while it ran ({self._zygote_exit()})")
        else:
            returncode = await self._end_tree()
            outcome = Outcome("timeout", None, signal_of(returncode), f"exceeded its {spec.timeout_s:g} s limit")
        cancelled.cancel()
        process_tree.kill_tree(self.pid, spec.command_id, spec.cgroup)
        await self._drain()
        self.zygote.runs.pop(spec.command_id, None)
        if spec.cgroup is not None:
            await asyncio.to_thread(cgroups.kill_and_remove, spec.cgroup)
        return outcome

    async def _end_tree(self) -> int | None:
        """SIGTERM the tree, give it the grace period, then SIGKILL what is left;
        the child's return code as the zygote reports it (None if it cannot)."""
        spec, pid = self.spec, self.pid
        assert pid is not None
        process_tree.signal_tree(pid, spec.command_id, spec.cgroup, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + spec.kill_grace_s
        while loop.time() < deadline:
            if self._exited.done() and not process_tree.alive(pid, spec.command_id, spec.cgroup):
                break
            if self.zygote.exited.done() and not process_tree.alive(pid, spec.command_id, spec.cgroup):
                break
            await asyncio.sleep(0.02)
        process_tree.kill_tree(pid, spec.command_id, spec.cgroup)
        await asyncio.wait({self._exited, self.zygote.exited}, timeout=EXIT_REPORT_TIMEOUT_S,
                           return_when=asyncio.FIRST_COMPLETED)
        return self._exited.result() if self._exited.done() else -signal.SIGKILL

    async def _drain(self) -> None:
        if self._readers:
            await asyncio.wait(self._readers, timeout=READER_DRAIN_TIMEOUT_S)
            for r in self._readers:
                r.cancel()

    def _gone(self, reason: str) -> Outcome:
        self.zygote.runs.pop(self.spec.command_id, None)
        return Outcome("failed", None, None, reason)

    def _zygote_exit(self) -> str:
        task = self.zygote.exited
        return describe_exit(task.result()) if task.done() and not task.cancelled() else "unknown status"


def _cwd_problem(cwd: str) -> str:
    """What a process command's spawn reports for the same cwd ("" when it is a directory, or none is asked for)."""
    if not cwd or os.path.isdir(cwd):
        return ""
    return "Not a directory" if os.path.exists(cwd) else "No such file or directory"
