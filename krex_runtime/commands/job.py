"""A command as the dispatcher holds it, from submission to its result record,
and the checks a submission must pass before any process is started for it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from krex_runtime.commands.build_folders import BuildFolder
from krex_runtime.commands.gpu_placement import GpuAsk
from krex_runtime.commands.launch import Outcome
from krex_runtime.commands.output import OutputLoss
from krex_runtime.host.identities import Identity
from krex_runtime.node.config import environment_problem
from krex_runtime.node.gpus import Gpu
from krex_runtime.wire.protocol.bodies import SubmitBody
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError


class RunningCommand(Protocol):
    """What a command runs as, whatever its mode (a process, a forked child, a
    pooled run in a context process): its root process, and how it is ended."""

    pid: int | None

    def cancel(self, reason: str) -> None: ...


@dataclass
class Job:
    id: str
    argv: list[str]
    gpu_request: int | None
    timeout_s: float
    cwd: str
    env: dict[str, str]
    label: str
    submitted_at: float
    state: str = "queued"
    gpu: int | None = None
    gpu_ask: GpuAsk | None = None  # asked for a set of GPUs (commands/gpu_placement.py); None: one GPU
    gpu_set: tuple[Gpu, ...] = ()  # placed on a set of GPUs: them, ascending (`gpu` is the first); (): one GPU
    tenant_id: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    process: RunningCommand | None = None
    outcome: Outcome | None = None
    stdout_path: Path | None = None
    stderr_path: Path | None = None
    cgroup: Path | None = None
    lease: bool = False
    internal: bool = False  # started by the runtime itself (a canary): takes no slot
    mode: str = "process"  # process | forked | pooled
    entry: dict[str, Any] | None = None  # forked, pooled: the Python entry point it runs
    worker: str | None = None  # pooled: the context process that runs it
    auto_region_report: Path | None = None  # with auto-regions: where its tenant lists what it wrapped
    auto_regions: list[str] = field(default_factory=list)  # what was wrapped (read when it ends)
    start_s: float | None = None  # placement to a running process: spawn (process), fork and placement (forked)
    unprotected_path: Path | None = None  # policy krex: where the library counts its unprotected timings
    unprotected_timings: int = 0  # event timings no single region covered (read when it ends)
    untracked_timings: int = 0  # event timings the library could not track, known neither way (read when it ends)
    share: str = "default"  # effective fair-share key, "<submitter>/<key>" (host/fair_share.py)
    output_loss: OutputLoss = field(default_factory=OutputLoss)  # output its files did not get (a full disk)
    identity: Identity | None = None  # tenants.uid_range: the uid it runs as (pooled: its context process's)
    submitter_uid: int | None = None  # who submitted it, by the kernel's word (None: unknown, tcp)
    build_folder: BuildFolder | None = None  # while it runs: its compile caches (commands/build_folders.py)
    evaluation: dict[str, Any] | None = None  # the evaluation its last stdout line reported (commands/evaluation_result.py)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    ending: bool = False  # it has ended; its result waits for a region's certificate (Dispatcher._finish)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def cancel(self, reason: str) -> None:
        """End a running command's process tree (see Dispatcher.cancel for any state)."""
        if self.process is not None:
            self.process.cancel(reason)

    def result(self) -> dict[str, Any]:
        """The record `krex run --json` and `krex wait --json` print."""
        o = self.outcome
        started = self.started_at
        finished = self.finished_at
        return {
            "id": self.id,
            "label": self.label,
            "gpu": self.gpu,
            **({"gpus": [g.index for g in self.gpu_set]} if self.gpu_set else {}),
            "state": self.state,
            "exit_code": o.exit_code if o else None,
            "signal": o.signal if o else None,
            "reason": o.reason if o else "",
            "submitted_at": self.submitted_at,
            "started_at": started,
            "finished_at": finished,
            "queue_s": (started if started is not None else finished or self.submitted_at) - self.submitted_at,
            "run_s": (finished - started) if started is not None and finished is not None else None,
            "total_s": (finished - self.submitted_at) if finished is not None else None,
            "lease": self.lease,
            "mode": self.mode,
            "worker": self.worker,
            "start_s": self.start_s,
            "stdout_path": str(self.stdout_path) if self.stdout_path else None,
            "stderr_path": str(self.stderr_path) if self.stderr_path else None,
            "auto_regions": list(self.auto_regions),
            "unprotected_timings": self.unprotected_timings,
            "untracked_timings": self.untracked_timings,
            "share": self.share,
            "output_lost": self.output_loss.record(),
            "output_error": self.output_loss.error,
            **({"evaluation": self.evaluation} if self.evaluation is not None else {}),
        }


def check_spawnable(body: SubmitBody) -> None:
    """A bad_request for what no process can be started with: the kernel takes
    argv, cwd and the environment as C strings."""
    for where, text in [("argv", a) for a in body.argv] + [("cwd", body.cwd)]:
        if "\0" in text:
            raise ProtocolError(ErrorCode.BAD_REQUEST, f"{where} holds a NUL character: {text[:60]!r}")
    problem = environment_problem(body.env)
    if problem is not None:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"env: {problem}")
