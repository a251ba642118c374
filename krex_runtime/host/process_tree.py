"""Ending a command's whole process tree, with or without a cgroup.

With a cgroup the tree is exactly the cgroup's members. Without one, the tree
is the command's process group, its descendants, and every process carrying
the command's KREX_COMMAND_ID in its environment: that last net catches
grandchildren that started their own session and were reparented away.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from krex_runtime.host import cgroups


def members(pid: int, command_id: str, cgroup: Path | None) -> set[int]:
    if cgroup is not None:
        return set(cgroups.procs(cgroup))
    found: set[int] = set()
    try:
        root = psutil.Process(pid)
        found.add(pid)
        found.update(p.pid for p in root.children(recursive=True))
    except psutil.Error:
        pass
    marker = command_id
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in found or proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get("KREX_COMMAND_ID") == marker:
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def contains(pid: int, cgroup: Path | None, member: int) -> bool:
    """Whether `member` is in the tree of the command whose process is `pid`: in
    its cgroup, or without one, `pid` itself or a descendant. Stricter than
    `members`: an environment is no proof of where a process comes from."""
    if cgroup is not None:
        return member in cgroups.procs(cgroup)
    try:
        return member == pid or any(p.pid == pid for p in psutil.Process(member).parents())
    except psutil.Error:
        return False


def signal_tree(pid: int, command_id: str, cgroup: Path | None, sig: int) -> None:
    """Send `sig` to the command's process group and every member of its tree."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for member in members(pid, command_id, cgroup):
        try:
            os.kill(member, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_all(pids: Iterable[int]) -> None:
    """SIGKILL each of `pids`, those gone or not ours skipped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(pid: int, command_id: str, cgroup: Path | None) -> None:
    """SIGKILL the whole tree now."""
    if cgroup is not None:
        cgroups.thaw(cgroup)
        cgroups.kill(cgroup)
    signal_tree(pid, command_id, cgroup, signal.SIGKILL)


async def leftovers_grace(alive: Callable[[], bool], grace_s: float, cancel: asyncio.Event) -> None:
    """Once a command's main process has ended: what it left running gets
    `grace_s` to end on its own (a cancel cuts it short); the caller then
    kills what is left. Its end is the main process's, not its children's."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while not cancel.is_set() and loop.time() < deadline and alive():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cancel.wait(), 0.05)  # a cancel ends the grace at once


def alive(pid: int, command_id: str, cgroup: Path | None) -> bool:
    if cgroup is not None:
        return cgroups.populated(cgroup)
    return any(not_zombie(p) for p in members(pid, command_id, cgroup))


def not_zombie(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
