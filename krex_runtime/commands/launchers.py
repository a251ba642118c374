"""How a placed command comes to run, one coroutine per mode.

`process` spawns its own process tree (commands/process/), `forked` has its
GPU's zygote fork it (commands/forked/), `pooled` hands its entry point to a
context process (commands/pooled/), `forwarded` spawns it like `process` with
its driver calls sent to a context server (commands/forwarded/). Each gives
the command its own tenant environment from the one builder
(commands/environment.py), emits `command_started` once it has a process, and
returns how the command ended, whatever happened: the dispatcher awaits it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krex_runtime.commands.environment import TenantSetup
from krex_runtime.commands.forked.forked_run import ForkedRun
from krex_runtime.commands.forwarded.forwarded_pool import ForwardedWorker
from krex_runtime.commands.forwarded.forwarded_run import ForwardedRun
from krex_runtime.commands.job import Job
from krex_runtime.commands.launch import LaunchSpec, Outcome
from krex_runtime.commands.pooled.pooled_worker import PooledWorker
from krex_runtime.commands.pools import NodePools
from krex_runtime.commands.process.command_process import CommandProcess
from krex_runtime.host import cgroups
from krex_runtime.node.config import Config
from krex_runtime.node.gpus import Gpu
from krex_runtime.wire.state import events

EnvEdit = Callable[[dict[str, str]], dict[str, str]]


@dataclass(frozen=True)
class Ended:
    """How a launched command ended, and whether it had started (had a process)."""

    outcome: Outcome
    started: bool


class Launchers:
    def __init__(
        self, config: Config, setup: TenantSetup, output: Callable[[Job, str, bytes], None],
        emit: Callable[[events.Event], None], pools: NodePools,
    ) -> None:
        self._config = config
        self._setup = setup
        self._output = output
        self._emit = emit
        self._pools = pools

    async def run(self, job: Job, gpu: Gpu, worker: PooledWorker | None, server: ForwardedWorker | None) -> Ended:
        """Run the command in its mode to its end, with its build folder held throughout."""
        builds = self._setup.builds
        if builds is not None and not job.internal:
            job.build_folder = builds.reserve(job.share)
        try:
            if builds is not None and job.build_folder is not None:
                try:
                    await asyncio.to_thread(builds.prepare, job.build_folder, *self._setup.owner_of(job.identity))
                except OSError as exc:
                    why = f"cannot start: its build folder: {exc.strerror or exc}"
                    return Ended(Outcome("failed", None, None, why), False)
            if worker is not None:
                return await self.run_pooled(job, gpu, worker)
            if server is not None:
                return await self.run_forwarded(job, gpu, server)
            return await (self.run_forked if job.mode == "forked" else self.run_process)(job, gpu)
        finally:
            if builds is not None and job.build_folder is not None:
                builds.give_back(job.build_folder)

    def env_of(self, job: Job, gpu: Gpu) -> dict[str, str]:
        env = self._setup.env.build(job.id, job.tenant_id, job.env, gpu, job.identity, job.gpu_set[1:])
        return self._setup.builds.apply(env, job.env, job.build_folder) if self._setup.builds is not None else env

    def _spec(self, job: Job, gpu: Gpu, cgroup: Path | None, edit_env: EnvEdit | None = None) -> LaunchSpec:
        assert job.stdout_path is not None and job.stderr_path is not None
        env = self.env_of(job, gpu)
        return LaunchSpec(
            command_id=job.id,
            argv=job.argv,
            cwd=job.cwd,
            env=edit_env(env) if edit_env is not None else env,
            timeout_s=job.timeout_s,
            kill_grace_s=self._config.dispatcher.kill_grace_s,
            orphan_grace_s=self._config.dispatcher.orphan_grace_s,
            loss=job.output_loss,
            stdout_path=job.stdout_path,
            stderr_path=job.stderr_path,
            cgroup=cgroup,
            # A set's command may use the cores of each of its GPUs.
            cpus=tuple(sorted({c for g in job.gpu_set or (gpu,) for c in self._setup.cores_of(g.index)})),
            run_as=self._setup.run_as_for(job.identity),
        )

    async def run_process(self, job: Job, gpu: Gpu) -> Ended:
        # A spawn that failed ran nothing: its cgroup is empty.
        return await self._launch(job, gpu, CommandProcess, _rmdir)

    async def run_forked(self, job: Job, gpu: Gpu) -> Ended:
        forked = self._pools.forked
        assert forked is not None and job.entry is not None
        zygote = forked.ready(gpu.index)
        if zygote is None:  # it died between placement and now
            why = forked.refused(gpu.index) or "the GPU's zygote is restarting"
            return Ended(Outcome("failed", None, None, f"cannot start: {why}"), False)
        entry = job.entry
        # A fork whose start failed may have left its child in the cgroup.
        return await self._launch(job, gpu, lambda spec, out: ForkedRun(spec, entry, zygote, out),
                           lambda cgroup: asyncio.to_thread(cgroups.kill_and_remove, cgroup))

    async def run_forwarded(self, job: Job, gpu: Gpu, server: ForwardedWorker) -> Ended:
        forwarded = self._pools.forwarded
        assert forwarded is not None
        run = ForwardedRun(self._config.forward, forwarded, server, self._setup.run_as_for(job.identity))
        failure = await run.begin(job)
        if failure is not None:
            await run.end()
            return Ended(failure, False)

        async def after(job: Job, outcome: Outcome) -> Outcome:
            outcome = await run.after(job, outcome)
            if not run.fell_back(outcome):
                return outcome
            # forward.fallback = "process": the same command, from the start, as a process command.
            note = f"krex: {run.unknown_call} is not forwarded; running the command again in process mode\n"
            self._output(job, "stderr", note.encode())
            # Its first cgroup went with the forwarded attempt: a fresh one.
            cgroup = self._setup.cgroups.create(f"cmd-{job.id}") if self._setup.cgroups is not None else None
            job.cgroup = cgroup
            process = CommandProcess(self._spec(job, gpu, cgroup), lambda stream, data: self._output(job, stream, data))
            job.process = process
            failed = await process.start()
            again = failed if failed is not None else await process.wait()
            # The result says why it ran twice, whatever its second run says.
            why = "; ".join(r for r in (run.fallback_note(), again.reason) if r)
            return dataclasses.replace(again, reason=why)

        return await self._launch(job, gpu, CommandProcess, _rmdir, run.edit_env, after=after)

    async def _launch(
        self, job: Job, gpu: Gpu, make: Callable[[LaunchSpec, Callable[[str, bytes], None]], Any],
        discard: Callable[[Path], Awaitable[object]], edit_env: EnvEdit | None = None,
        after: Callable[[Job, Outcome], Awaitable[Outcome]] | None = None,
    ) -> Ended:
        """Start a process or forked command in its own cgroup, then follow it
        to its end (`after` may change its outcome before it is reported)."""
        cgroup = self._setup.cgroups.create(f"cmd-{job.id}") if self._setup.cgroups is not None else None
        job.cgroup = cgroup
        process = make(self._spec(job, gpu, cgroup, edit_env), lambda stream, data: self._output(job, stream, data))
        job.process = process
        t0 = time.monotonic()
        failure = await process.start()
        job.start_s = time.monotonic() - t0
        if failure is not None:
            if cgroup is not None:
                await discard(cgroup)
            if after is not None:
                failure = await after(job, failure)
            return Ended(failure, False)
        return await self._follow(job, gpu, process.pid, process.wait, after)

    async def _follow(
        self, job: Job, gpu: Gpu, pid: int | None, wait: Callable[[], object],
        after: Callable[[Job, Outcome], Awaitable[Outcome]] | None = None,
    ) -> Ended:
        job.started_at = time.time()
        self._emit(events.CommandStarted(id=job.id, gpu=gpu.index, pid=pid, tenant_id=job.tenant_id, worker=None,
                                         gpus=[g.index for g in job.gpu_set] or None))
        try:
            outcome = await wait()  # type: ignore[misc]
            if after is not None:
                outcome = await after(job, outcome)
        except Exception as exc:  # never leave a slot taken by a command we lost track of
            outcome = Outcome("failed", None, None, f"runtime error while running: {exc!r}")
        return Ended(outcome, True)

    async def run_pooled(self, job: Job, gpu: Gpu, worker: PooledWorker) -> Ended:
        pooled = self._pools.pooled
        assert pooled is not None and job.entry is not None
        assert job.stdout_path is not None and job.stderr_path is not None
        job.process, job.cgroup = worker.run, worker.cgroup
        job.started_at = time.time()
        self._emit(
            events.CommandStarted(id=job.id, gpu=gpu.index, pid=worker.pid, tenant_id=job.tenant_id, worker=worker.id,
                                  gpus=None)
        )
        try:
            outcome = await pooled.run(
                worker, job.id, job.entry, job.cwd, self.env_of(job, gpu), job.timeout_s,
                job.stdout_path, job.stderr_path, lambda stream, data: self._output(job, stream, data),
                job.output_loss, self._config.dispatcher.orphan_grace_s,
            )
        except Exception as exc:  # never leave a slot taken by a command we lost track of
            outcome = Outcome("failed", None, None, f"runtime error while running: {exc!r}")
        return Ended(outcome, True)


async def _rmdir(cgroup: Path) -> None:
    """Remove a cgroup nothing ran in."""
    await asyncio.to_thread(cgroup.rmdir)
