"""Running one command as a process tree: spawn, capture, time limit, cancel.

Each command gets its own session (so its own process group) and, where cgroup
v2 is writable, its own cgroup joined before exec, so that not even an early
fork escapes. Output goes to files and to whoever is attached
(commands/output.py). A command ends when its main process exits, not when
its output pipes close: whatever it left running (a background child, a
daemon holding its stdout) gets `dispatcher.orphan_grace_s`, then is ended
too: a benchmark command's stray children must not keep using the GPU, or
keep the command running, after its main process is done.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

from krex_runtime.commands.launch import LaunchSpec, Outcome, child_setup, outcome_of, signal_of
from krex_runtime.commands.output import READER_DRAIN_TIMEOUT_S, OutputSink, pump_output
from krex_runtime.host import cgroups, process_tree


class CommandProcess:
    def __init__(self, spec: LaunchSpec, sink: OutputSink) -> None:
        self.spec = spec
        self.pid: int | None = None
        self._sink = sink
        self._cancel = asyncio.Event()
        self._cancel_reason = ""

    def cancel(self, reason: str) -> None:
        self._cancel_reason = reason
        self._cancel.set()

    async def start(self) -> Outcome | None:
        """Spawn the process; an Outcome when it could not be started."""
        spec = self.spec
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=spec.cwd or None,
                env=spec.env,
                start_new_session=True,
                preexec_fn=child_setup(spec.cgroup, spec.cpus, spec.run_as),
            )
        except FileNotFoundError as exc:
            return Outcome("failed", 127, None, f"cannot start: {exc.strerror}: {exc.filename}")
        except PermissionError as exc:
            return Outcome("failed", 126, None, f"cannot start: {exc.strerror}: {exc.filename}")
        except (OSError, ValueError, subprocess.SubprocessError) as exc:  # ValueError: a NUL in a string
            return Outcome("failed", None, None, f"cannot start: {exc}")
        self.pid = self._proc.pid
        return None

    async def wait(self) -> Outcome:
        """Run to the end: exit, time limit or cancel, then end the whole tree."""
        spec, proc = self.spec, self._proc
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            asyncio.create_task(pump_output(proc.stdout, "stdout", spec.stdout_path, self._sink, spec.loss)),
            asyncio.create_task(pump_output(proc.stderr, "stderr", spec.stderr_path, self._sink, spec.loss)),
        ]
        exited = asyncio.create_task(main_exit(proc))
        cancelled = asyncio.create_task(self._cancel.wait())
        done, _ = await asyncio.wait({exited, cancelled}, timeout=spec.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            outcome = outcome_of(exited.result())
            await process_tree.leftovers_grace(
                lambda: process_tree.alive(proc.pid, spec.command_id, spec.cgroup), spec.orphan_grace_s, self._cancel
            )
        elif cancelled in done:
            await self._end_tree(exited)
            outcome = Outcome("cancelled", None, signal_of(proc.returncode), self._cancel_reason)
        else:
            await self._end_tree(exited)
            outcome = Outcome("timeout", None, signal_of(proc.returncode), f"exceeded its {spec.timeout_s:g} s limit")
        cancelled.cancel()
        # Leftovers of a finished command (daemonised grandchildren) go too.
        process_tree.kill_tree(proc.pid, spec.command_id, spec.cgroup)
        await asyncio.wait(readers, timeout=READER_DRAIN_TIMEOUT_S)
        for r in readers:
            r.cancel()
        if spec.cgroup is not None:
            await asyncio.to_thread(cgroups.kill_and_remove, spec.cgroup)
        await asyncio.wait({exited}, timeout=READER_DRAIN_TIMEOUT_S)  # reaped, its pidfd closed
        exited.cancel()
        return outcome

    async def _end_tree(self, exited: asyncio.Task[int]) -> None:
        """SIGTERM the tree, give it the grace period, then SIGKILL what is left."""
        spec, pid = self.spec, self._proc.pid
        process_tree.signal_tree(pid, spec.command_id, spec.cgroup, signal.SIGTERM)
        deadline = asyncio.get_running_loop().time() + spec.kill_grace_s
        while asyncio.get_running_loop().time() < deadline:
            if exited.done() and not process_tree.alive(pid, spec.command_id, spec.cgroup):
                break
            await asyncio.sleep(0.02)
        process_tree.kill_tree(pid, spec.command_id, spec.cgroup)
        await asyncio.wait({exited}, timeout=READER_DRAIN_TIMEOUT_S)


async def main_exit(proc: asyncio.subprocess.Process) -> int:
    """The main process's exit status as soon as it exits. asyncio's own
    `wait()` also waits for the output pipes to close, which a child that
    keeps them open (`sleep 60 &`) would put off for as long as it runs; a
    pidfd says when the process itself has ended."""
    loop = asyncio.get_running_loop()
    try:
        fd: int | None = os.pidfd_open(proc.pid)
    except OSError:  # already reaped, or no pidfds: the status comes all the same
        fd = None
    if fd is not None:
        ended: asyncio.Future[None] = loop.create_future()

        def end() -> None:
            if not ended.done():
                ended.set_result(None)

        loop.add_reader(fd, end)
        try:
            await ended
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    # The child watcher reaps it right after; nothing to wait on but its returncode.
    while proc.returncode is None:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    return proc.returncode
