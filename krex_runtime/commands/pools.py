"""The worker pools a node runs, one per configured mode, and what is asked of them together.

The node builds them from its config (pooled mode's context processes,
forked mode's zygotes, forwarded mode's context servers) and owns their life:
start, stop replacing, shut down. The dispatcher is handed them to place
commands; that a worker became ready (or that a zygote refused) it learns by
one signal, the event `ready`, which it awaits: no pool calls it. Which
command a process of a pool acts for, and whether a process is one a pool
started, is asked here, of all the pools at once.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from krex_runtime.commands.environment import TenantSetup
from krex_runtime.commands.forked.forked_pool import ForkedPool
from krex_runtime.commands.forwarded import forward_ring
from krex_runtime.commands.forwarded.forwarded_pool import ForwardedPool
from krex_runtime.commands.pooled.pooled_pool import PooledPool
from krex_runtime.commands.workers.worker_pool import WorkerPool
from krex_runtime.node import native_build
from krex_runtime.node.config import Config
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.tenant.pooled_entry import EntryError, parse_entry

log = logging.getLogger("krex.runtime")


class NodePools:
    def __init__(self, config: Config, gpus: list[Gpu], sink: EventSink, setup: TenantSetup, log_dir: Path) -> None:
        self._config = config
        # Set when a worker became ready or a zygote refused: a queued command may start, or fail.
        self.ready = asyncio.Event()
        self.pooled: PooledPool | None = (
            PooledPool(config.pool, config.dispatcher.kill_grace_s, gpus, sink, setup, log_dir, self._ready)
            if config.pool.size_per_gpu > 0
            else None
        )
        self.forked: ForkedPool | None = (
            ForkedPool(config.pool, gpus, sink, setup, log_dir, self._ready) if config.pool.zygote else None
        )
        self.forwarded: ForwardedPool | None = (
            ForwardedPool(config.forward, config.dispatcher.kill_grace_s, gpus, setup, log_dir,
                          native_build.context_server(), self._ready,
                          segment_prefix=forward_ring.segment_prefix(setup.env.run_dir))
            if config.forward.servers_per_gpu > 0
            else None
        )

    def _ready(self) -> None:
        self.ready.set()

    def _running(self) -> list[WorkerPool[Any]]:
        return [pool for pool in (self.pooled, self.forked, self.forwarded) if pool is not None]

    # --- what each mode waits for --------------------------------------------------

    def default_mode(self, argv: list[str]) -> str:
        """The configured mode; with forward.native_default, a command that is
        not a Python entry point runs forwarded (where context servers serve)."""
        if self._config.forward.native_default and self.forwarded is not None:
            try:
                parse_entry(list(argv))
            except EntryError:
                return "forwarded"
        return self._config.dispatcher.default_mode

    def refusal(self, mode: str, gpu: int | None) -> str:
        """Why a command of `mode` for `gpu` (None: any GPU) is refused at submission ("" when it is not)."""
        if mode == "forwarded" and self.forwarded is None:
            return "forwarded commands need context servers (forward.servers_per_gpu >= 1)"
        if mode == "pooled" and self.pooled is None:
            return "pooled commands need a context pool (pool.size_per_gpu >= 1)"
        if mode == "forked":
            if self.forked is None:
                return "forked commands need the zygotes (pool.zygote = true)"
            refused = self.forked.refused(gpu)
            if refused:
                return f"forked mode is unavailable: {refused}"
        return ""

    def has_ready(self, mode: str, gpu: int) -> bool:
        """A worker of `gpu` ready for a command of `mode` (process mode needs none): a
        command never waits for one to be created while another is idle elsewhere."""
        if mode == "forked":
            return self.forked is not None and self.forked.ready(gpu) is not None
        if mode == "forwarded":
            return self.forwarded is not None and self.forwarded.has_idle(gpu)
        if mode == "pooled":
            return self.pooled is not None and self.pooled.has_idle(gpu)
        return True

    def awaited(self, mode: str, where: str) -> str:
        """What a queued command of `mode` waited for in vain, `where` naming its GPUs."""
        if mode == "pooled":
            return f"no context process of {where} became idle"
        if mode == "forwarded":
            return f"no context server of {where} became idle"
        return f"no zygote of {where} became ready"

    # --- life ----------------------------------------------------------------

    def start(self) -> None:
        preload = list(self._config.pool.preload) or "nothing"
        if self.pooled is not None:
            log.info("context pool: %d per GPU, preloading %s", self.pooled.size, preload)
        if self.forked is not None:
            log.info("forked mode: a zygote per GPU, preloading %s", preload)
        for pool in self._running():
            pool.start()

    def stop_replacing(self) -> None:
        """From runtime shutdown on: workers that end are not replaced."""
        for pool in self._running():
            pool.stop_replacing()

    async def shutdown(self) -> None:
        for pool in self._running():
            await pool.shutdown()

    # --- who a process is ---------------------------------------------------------

    def acts_for_commands(self, pid: int) -> bool:
        """A context server of forwarded mode: the command it acts for changes
        (known by pid: a server's /proc environment is not readable)."""
        return self.forwarded is not None and self.forwarded.acts_for_commands(pid)

    def command_of(self, pid: int, command_id: str) -> str:
        """The command process `pid`, whose environment names `command_id`, acts
        for: a context process's current command, a forked child's (it keeps
        its zygote's environment), a context server's; `command_id` itself for
        any process no pool started ("" for a pool's process serving none now)."""
        for pool in self._running():
            mine = pool.command_of(pid, command_id)
            if mine is not None:
                return mine
        return command_id

    def started(self, pid: int, command_id: str) -> bool:
        """Whether process `pid` (its environment naming `command_id`) is one a pool started."""
        return any(pool.started(pid, command_id) for pool in self._running())
