"""One forwarded command: its segment, its context server, and what its end says.

The command runs as a process command does (its own process tree, cgroup,
gate entries, region token, output), with two differences in its
environment: forwarded mode's libcuda.so.1 comes first on its library path
(every driver call it makes, by symbol, dlsym or cuGetProcAddress, reaches
the client), KREX_FORWARD_RING names its segment and KREX_FORWARD_PINNED its
pinned arena (empty with `forward.pinned_mib = 0`). The interception
library stays preloaded in front of the client, so the command's gate,
drain, event timing and integrity work as in process mode; a drain's
cuCtxSynchronize goes through the ring behind whatever the command sent.

When the command has ended, its server is told to put its context back; the
outcome says what happened on the server's side: a request it refused
(malformed, oversized), its death, or a call the client does not forward.
"""

from __future__ import annotations

import asyncio
import dataclasses

from krex_runtime.commands.forwarded.forward_ring import (
    ENV_FALLBACK,
    ENV_PINNED,
    ENV_RING,
    EXIT_UNKNOWN_CALL,
    STATE_FAILED,
    Segment,
)
from krex_runtime.commands.forwarded.forwarded_pool import ForwardedPool, ForwardedWorker, describe
from krex_runtime.commands.job import Job
from krex_runtime.commands.launch import Outcome
from krex_runtime.node import native_build
from krex_runtime.node.access import RunAs
from krex_runtime.node.config import ForwardSection

# The driver call only a CUDA runtime makes: the client reports it when the
# program brought its own runtime (forwarded mode's libcudart never asks).
EXPORT_TABLE = "cuGetExportTable"


class ForwardedRun:
    def __init__(self, settings: ForwardSection, pool: ForwardedPool, server: ForwardedWorker, run_as: RunAs | None) -> None:
        self._settings = settings
        self._pool = pool
        self._server = server
        self._owner = (run_as.user.uid, run_as.user.gid) if run_as is not None and run_as.user is not None else None
        self.segment: Segment | None = None
        self.unknown_call = ""  # the first call its client did not forward
        self.after_region = False  # ...made after the command had held a region
        self.staged_pinned_copies = 0  # copies from or to page-locked memory, staged

    async def begin(self, job: Job) -> Outcome | None:
        """Its segment, served by its server; an Outcome when it cannot start."""
        assert job.tenant_id is not None
        try:
            self.segment = Segment(self._pool.segment_prefix, job.id, self._settings.ring_kib * 1024,
                                   self._settings.staging_kib * 1024, self._owner, self._settings.pinned_mib << 20)
        except OSError as exc:
            return Outcome("failed", None, None, f"cannot start: cannot make its forwarding segment: {exc}")
        why = await self._pool.serve(self._server, self.segment, job.tenant_id)
        if why:
            return Outcome("failed", None, None, f"cannot start: {why}")
        # A server that dies while the command runs: its client, waiting on
        # it, reads this from the segment within its park bound.
        self._server.exited.add_done_callback(self._server_died)
        return None

    def _server_died(self, task: asyncio.Task[int]) -> None:
        if self.segment is not None and self._server.state == "busy":
            code = task.result() if not task.cancelled() else None
            self.segment.mark_failed(f"the context server (pid {self._server.pid}) died ({describe(code)})")

    def edit_env(self, env: dict[str, str]) -> dict[str, str]:
        assert self.segment is not None
        client = str(native_build.forwarding_client_dir())
        env[ENV_RING] = str(self.segment.path)
        env[ENV_PINNED] = str(self.segment.pinned_path) if self.segment.pinned_fd >= 0 else ""
        env[ENV_FALLBACK] = self._settings.fallback
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (client, env.get("LD_LIBRARY_PATH", "")) if p)
        return env

    async def end(self) -> tuple[str, str]:
        """The server puts its context back; (what it refused, why it stopped)."""
        if self.segment is None:
            return "", ""
        self._server.exited.remove_done_callback(self._server_died)
        state = self.segment.state()
        self.unknown_call = state.unknown_call
        self.after_region = state.after_region
        self.staged_pinned_copies = state.staged_pinned_copies
        stopped = state.reason if state.state == STATE_FAILED else ""
        refused = await self._pool.release(self._server, self.segment)
        self.segment = None
        return refused, stopped

    async def after(self, job: Job, outcome: Outcome) -> Outcome:
        """The command's outcome, with what its server side says."""
        refused, stopped = await self.end()
        reason = outcome.reason
        if refused or stopped:
            # Its GPU calls failed from then on: whatever it did next, it failed.
            reason = f"its context server refused a request: {refused}" if refused else stopped
            outcome = dataclasses.replace(outcome, state="failed" if outcome.state == "finished" else outcome.state)
        elif self.unknown_call == EXPORT_TABLE:
            # Whatever the program did after its runtime found no tables, this is why.
            reason = (f"it carries its own CUDA runtime (cudart linked statically, nvcc's default, or a libcudart "
                      f"loaded by path), which asks for the driver's private tables ({EXPORT_TABLE}) and cannot "
                      f"run forwarded: build it with `nvcc -cudart shared`, or run it in process mode")
        elif self.unknown_call and self.after_region:
            # It cannot run again: what it measured in its regions would be measured twice.
            reason = (f"it called {self.unknown_call} after it had held a region: forwarded mode does not forward "
                      f"it, and a command runs again in process mode only before its first region (its "
                      f"measurements cannot be redone behind its back); run it in process mode")
            outcome = dataclasses.replace(outcome, state="failed" if outcome.state == "finished" else outcome.state)
        elif self.unknown_call and (outcome.exit_code or outcome.signal):
            reason = f"it called {self.unknown_call}, which forwarded mode does not forward (run it in process mode)"
        if self.staged_pinned_copies and not self.fell_back(outcome):
            reason = "; ".join(r for r in (reason, staged_note(self.staged_pinned_copies)) if r)
        return dataclasses.replace(outcome, reason=reason) if reason != outcome.reason else outcome

    def fell_back(self, outcome: Outcome) -> bool:
        """The client ended the command at a call it does not forward, to run it again in process mode."""
        return (self._settings.fallback == "process" and bool(self.unknown_call) and not self.after_region
                and outcome.exit_code == EXIT_UNKNOWN_CALL)

    def fallback_note(self) -> str:
        """What the result of a command run again in process mode says."""
        return (f"ran again in process mode: it called {self.unknown_call}, which forwarded mode does not forward "
                f"(before its first region)")


def staged_note(copies: int) -> str:
    """A forwarded copy from page-locked memory the server cannot map (registered
    by the program, or beyond the pinned arena) is not one DMA from the
    program's pages: its bytes cross the segment (docs/modes.md)."""
    return (f"{copies} cop{'y' if copies == 1 else 'ies'} from or to page-locked host memory (registered by the "
            f"program, or beyond forward.pinned_mib) went through the forwarding segment (a staged copy, not the "
            f"copy asked for): event timings around them measure the staging")

