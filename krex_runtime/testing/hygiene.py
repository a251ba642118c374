"""What a runtime leaves on its node: processes, cgroups, gates, sockets,
tenant homes and reports, locks, shared memory and file descriptors.

A runtime freezes and gates other people's processes, so after any run or
fault the node must be as it was. Tests and the soak benchmark take a
`Baseline` before a runtime starts and ask `leftovers` after it stopped;
while it runs, `held_back` lists whatever is still frozen, stopped or parked,
and `open_fds` samples its descriptors. Every finding is one line naming the
thing, so a failure says what leaked.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from krex_runtime.commands.forwarded import forward_ring
from krex_runtime.commands.tenant_reports import FOLDER as REPORTS
from krex_runtime.host import cgroups
from krex_runtime.host.identities import HOMES
from krex_runtime.regions.gate.core import Gate, GateError
from krex_runtime.regions.machinery import GATES_DIR
from krex_runtime.sim.layout import SHM_DIR, SHM_FILE_PREFIX


@dataclass(frozen=True)
class Baseline:
    """What existed before the runtime started (and is not its doing)."""

    descendants: frozenset[tuple[int, float]]  # (pid, start time) of this process's descendants
    shm: frozenset[str]  # entries of /dev/shm


def baseline() -> Baseline:
    return Baseline(frozenset(_identity(p) for p in _descendants()), frozenset(_shm_entries()))


def leftovers(run_dir: Path, lock_dir: Path, base: Baseline) -> list[str]:
    """Everything a runtime of `run_dir` that has stopped left behind; [] when
    the node is clean."""
    found = [f"process {p.pid} ({_describe(p)}) of {run_dir}" for p in krex_processes(run_dir)]
    found += [
        f"process {proc.pid} ({_describe(proc)}) started during the run"
        for proc in _descendants()
        if _identity(proc) not in base.descendants
    ]
    for version in (2, 1):
        path = cgroups.slice_path(run_dir, version)
        if path is not None and path.exists():
            children = [c.name for c in path.iterdir() if c.is_dir()]
            found.append(f"cgroup v{version} slice {path} (command cgroups: {children or 'none'})")
    found += [f"gate file {p}" for p in sorted((run_dir / GATES_DIR).glob("*.gate*"))]
    found += [f"tenant home {p}" for p in sorted((run_dir / HOMES).glob("*"))]
    found += [f"tenant report {p}" for p in sorted((run_dir / REPORTS).glob("*"))]
    if run_dir.is_dir():
        found += [f"socket {p}" for p in sorted(run_dir.iterdir()) if p.is_socket()]
    for lock in [run_dir / "runtime.lock", *sorted(lock_dir.glob("*.lock"))]:
        if lock_held(lock):
            found.append(f"lock {lock} still held")
    mine = forward_ring.segment_prefix(run_dir)  # another runtime's segments are not this one's leftovers
    found += [f"shared memory {SHM_DIR}/{name}" for name in sorted(set(_shm_entries()) - base.shm)
              if _made_by_krex(name) and (not name.startswith(forward_ring.SEGMENT_NAMES) or name.startswith(mine))]
    return found


def held_back(run_dir: Path) -> list[str]:
    """What is frozen, stopped or parked right now among the runtime's
    tenants (for a runtime that is running: [] when no region is held)."""
    found = []
    for path in sorted((run_dir / GATES_DIR).glob("*.gate")):
        try:
            with Gate.attach(path) as gate:
                if gate.is_closed:
                    found.append(f"{path.name} is closed")
                if gate.parked():
                    found.append(f"{path.name}: {gate.parked()} thread(s) parked")
        except GateError:
            continue  # removed while we looked: a stopping runtime
    for version in (2, 1):
        slice_dir = cgroups.slice_path(run_dir, version)
        if slice_dir is not None and slice_dir.is_dir():
            found += [f"cgroup {group} is frozen" for group in sorted(slice_dir.iterdir())
                      if group.is_dir() and is_frozen(group)]
    for proc in krex_processes(run_dir):
        try:
            if proc.status() == psutil.STATUS_STOPPED:
                found.append(f"process {proc.pid} ({_describe(proc)}) is stopped")
        except psutil.Error:
            continue
    return found


def is_frozen(group: Path) -> bool:
    """A command cgroup frozen by either cgroup version's freezer."""
    events, state = group / "cgroup.events", group / "freezer.state"
    try:
        if events.exists():
            return "frozen 1" in events.read_text()
        return state.exists() and state.read_text().strip() == "FROZEN"
    except OSError:
        return False  # removed while we looked


def krex_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes started for the runtime of `run_dir`: commands, context
    processes, canaries. The krex CLI runs with KREX_RUN_DIR too (to find the
    sockets); what the runtime starts also carries a command or worker id."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            env = proc.environ()
            ours = env.get("KREX_RUN_DIR") == str(run_dir) and "KREX_COMMAND_ID" in env
            if ours and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def alive(pid: int | None) -> bool:
    """A process that exists and is not a zombie."""
    if pid is None:
        return False
    try:
        status: str = psutil.Process(pid).status()
    except psutil.Error:
        return False
    return status != psutil.STATUS_ZOMBIE


def open_fds(pid: int) -> dict[int, str]:
    """The process's open descriptors and what each points at."""
    found = {}
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found[int(entry.name)] = os.readlink(entry)
        except OSError:
            continue  # closed while we looked
    return found


def grown_fds(pid: int, before: dict[int, str]) -> list[str]:
    """Descriptors open now beyond the count of `before` (new ones named); []
    when the count did not grow."""
    now = open_fds(pid)
    if len(now) <= len(before):
        return []
    return [f"fd {fd} -> {target}" for fd, target in sorted(now.items()) if before.get(fd) != target]


def _descendants() -> list[psutil.Process]:
    """This process's live descendants (the runtime, commands that kept our
    session, CLI calls still running)."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


def _identity(proc: psutil.Process) -> tuple[int, float]:
    try:
        return proc.pid, proc.create_time()
    except psutil.Error:
        return proc.pid, 0.0


def _describe(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:120] or proc.name()
    except psutil.Error:
        return "gone"


def lock_held(path: Path) -> bool:
    """Whether some process holds an exclusive flock on `path` (asked without blocking; False: no such file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _shm_entries() -> list[str]:
    try:
        return os.listdir(SHM_DIR)
    except OSError:
        return []


def _made_by_krex(name: str) -> bool:
    """The runtime's shared memory lives in its run folder (gate files); a
    KREX entry in /dev/shm would be new. The simulated devices there are the
    simulator's hardware, made by tenants and shared by every runtime on the
    machine, so they do not count."""
    return name.startswith("krex") and not name.startswith(SHM_FILE_PREFIX)
