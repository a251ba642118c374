"""What launching a command shares across modes: the spec it is started with,
what its child does between fork and exec, and the outcome it ends with.

A process command, a forked command and a forwarded one are all started from
a LaunchSpec; every mode, and every worker pool starting its own processes,
joins a cgroup, takes the tenant cores and becomes the tenants' user the same
way (child_setup); every run ends in an Outcome the dispatcher reports.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from krex_runtime.commands.output import OutputLoss
from krex_runtime.node.access import RunAs


@dataclass(frozen=True)
class LaunchSpec:
    command_id: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    kill_grace_s: float
    stdout_path: Path
    stderr_path: Path
    cgroup: Path | None
    orphan_grace_s: float = 0.0  # after the main process exits, for what it left running
    loss: OutputLoss = field(default_factory=OutputLoss)  # what its output files did not get
    cpus: tuple[int, ...] = ()  # tenant cores; () leaves the affinity as it is
    run_as: RunAs | None = None  # None: as the runtime, with its umask


@dataclass(frozen=True)
class Outcome:
    state: str  # finished | timeout | cancelled | failed
    exit_code: int | None
    signal: int | None
    reason: str


def child_setup(cgroup: Path | None, cpus: tuple[int, ...], run_as: RunAs | None) -> Callable[[], None] | None:
    """Runs in the child between fork and exec: join the command's cgroup, take
    the tenant cores, then become the tenants' user (last: joining needs the
    runtime's rights). Only raw os calls here; the child must not take
    Python-level locks."""
    if cgroup is None and not cpus and run_as is None:
        return None
    procs_file = os.fsencode(cgroup / "cgroup.procs") if cgroup is not None else None

    def setup() -> None:
        if procs_file is not None:
            fd = os.open(procs_file, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        if cpus:
            os.sched_setaffinity(0, cpus)
        if run_as is not None:
            os.umask(run_as.umask)
            if run_as.user is not None:
                os.setgroups(list(run_as.groups))
                os.setgid(run_as.user.gid)
                os.setuid(run_as.user.uid)

    return setup


def signal_of(returncode: int | None) -> int | None:
    return -returncode if returncode is not None and returncode < 0 else None


def outcome_of(returncode: int | None) -> Outcome:
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return Outcome("finished", None, -returncode, f"killed by {name}")
    return Outcome("finished", returncode, None, "")


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "unknown status"
    if returncode < 0:
        sig = -returncode
        return f"killed by {signal.Signals(sig).name if sig in signal.valid_signals() else sig}"
    return f"exit code {returncode}"
