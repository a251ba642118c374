"""Freezing the other tenants' process trees while a region is held.

Three mechanisms, best first; the runtime reports which one it uses:
  - cgroup v2: write 1 to cgroup.freeze, wait for "frozen 1" in cgroup.events;
  - cgroup v1 freezer: write FROZEN to freezer.state, wait until it reads FROZEN;
  - signals: SIGSTOP every process of the tree, wait until each is stopped.

A tree that was already stopped by someone else before we froze it stays
stopped after thaw: with signals we only continue what we stopped.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from krex_runtime.host import cgroups, process_tree

FREEZE_TIMEOUT_S = 5.0


class FreezeError(Exception):
    pass


@dataclass
class Target:
    """One tenant's process tree."""

    command_id: str
    pid: int
    cgroup: Path | None = None  # in the hierarchy of the freezer that uses it
    stopped_by_us: set[int] = field(default_factory=set)


def process_state(pid: int) -> str:
    """The one-letter state of /proc/<pid>/stat ('R', 'S', 'T', 'Z'...), '' if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return ""
    return data[data.rindex(b")") + 2 : data.rindex(b")") + 3].decode()


def is_stopped(pid: int) -> bool:
    return process_state(pid) in ("T", "t")


class Freezer:
    name = "none"

    def freeze(self, targets: list[Target]) -> None:
        raise NotImplementedError

    def thaw(self, targets: list[Target]) -> None:
        raise NotImplementedError


class CgroupV2Freezer(Freezer):
    name = "cgroup-v2"

    def freeze(self, targets: list[Target]) -> None:
        groups = [t.cgroup for t in targets if t.cgroup is not None]
        for g in groups:  # all writes first: the kernel freezes them in parallel
            _write(g / "cgroup.freeze", "1")
        deadline = time.monotonic() + FREEZE_TIMEOUT_S
        for g in groups:
            while not _frozen_v2(g):
                if time.monotonic() > deadline:
                    raise FreezeError(f"{g} did not report frozen within {FREEZE_TIMEOUT_S:g} s")
                time.sleep(0.0002)

    def thaw(self, targets: list[Target]) -> None:
        _thaw_each(targets, lambda t: _write(t.cgroup / "cgroup.freeze", "0") if t.cgroup is not None else None)


def _frozen_v2(cgroup: Path) -> bool:
    text = cgroups.read_file(cgroup / "cgroup.events")
    if text is None:
        return True  # the cgroup is gone or going (its command ended): nothing in it can run
    return "frozen 1" in text or "populated 0" in text


class CgroupV1Freezer(Freezer):
    name = "cgroup-v1"

    def freeze(self, targets: list[Target]) -> None:
        groups = [t.cgroup for t in targets if t.cgroup is not None]
        for g in groups:
            _write(g / "freezer.state", "FROZEN")
        deadline = time.monotonic() + FREEZE_TIMEOUT_S
        for g in groups:
            while _read(g / "freezer.state") not in ("FROZEN", ""):
                if time.monotonic() > deadline:
                    raise FreezeError(f"{g} did not reach FROZEN within {FREEZE_TIMEOUT_S:g} s")
                time.sleep(0.0002)

    def thaw(self, targets: list[Target]) -> None:
        _thaw_each(targets, lambda t: _write(t.cgroup / "freezer.state", "THAWED") if t.cgroup is not None else None)


class SignalFreezer(Freezer):
    name = "sigstop"

    def freeze(self, targets: list[Target]) -> None:
        for t in targets:
            members = process_tree.members(t.pid, t.command_id, t.cgroup)
            t.stopped_by_us = {p for p in members if not is_stopped(p)}
            for pid in t.stopped_by_us:
                _kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + FREEZE_TIMEOUT_S
        for t in targets:
            for pid in t.stopped_by_us:
                while process_state(pid) not in ("T", "t", "Z", "X", ""):
                    if time.monotonic() > deadline:
                        raise FreezeError(f"process {pid} did not stop within {FREEZE_TIMEOUT_S:g} s")
                    time.sleep(0.0002)

    def thaw(self, targets: list[Target]) -> None:
        for t in targets:
            for pid in t.stopped_by_us:
                _kill(pid, signal.SIGCONT)
            t.stopped_by_us = set()


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _thaw_each(targets: list[Target], thaw_one: Callable[[Target], None]) -> None:
    """Thaw every target even when one fails (one left frozen must not keep the
    others frozen); then raise the first failure."""
    first: OSError | None = None
    for t in targets:
        try:
            thaw_one(t)
        except OSError as exc:
            first = first or exc
    if first is not None:
        raise first


def _write(path: Path, value: str) -> None:
    # A cgroup gone or being removed (ENOENT, ENODEV) is a command that ended
    # meanwhile: nothing to freeze or thaw there.
    cgroups.write_file(path, value)


def _read(path: Path) -> str:
    try:
        return (cgroups.read_file(path) or "").strip()
    except OSError:
        return ""


def freezer_for(cgroup_version: int | None) -> Freezer:
    """The best freezer the tenants' cgroups allow."""
    if cgroup_version == 2:
        return CgroupV2Freezer()
    if cgroup_version == 1:
        return CgroupV1Freezer()
    return SignalFreezer()
