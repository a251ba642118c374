"""A uid of its own for each tenant (`tenants.uid_range`).

Tenants that share a uid can read each other's /proc/<pid>/environ (their
region tokens), open each other's descriptors, signal and ptrace each other
and write each other's files. With a range configured, each process or forked
command and each context process runs as a uid from it, with a group of the
same number as its primary group and the tenants' group as its only other
one; nothing else runs as that uid while the tenant lives. (A forked
command's child takes it from the zygote: tenant/forked_child.py.)

A uid is handed out by `take` and comes back by `give_back` once the tenant's
processes have ended (its cgroup is empty by then). Whatever still runs as
that uid (a process that escaped the command's tree, with cgroups off) is
killed when it comes back, and again before it is handed out, so a new
tenant never meets a former one's leftovers. Uids come back to the end of
the line: the one handed out next is the one free the longest.

Each tenant also gets a home of its own, `<run_dir>/tenant-homes/<uid>`,
made empty when the uid is handed out and removed when it comes back.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from krex_runtime.commands import process_tree

log = logging.getLogger("krex.identities")

HOMES = "tenant-homes"


@dataclass(frozen=True)
class Identity:
    """The uid (and group of the same number) one tenant runs as."""

    uid: int
    group: int  # the tenants' group, the tenant's only supplementary group
    home: Path

    @property
    def gid(self) -> int:
        return self.uid


class Identities:
    def __init__(self, first: int, count: int, group: int, run_dir: Path) -> None:
        self.first, self.count, self.group = first, count, group
        self._free: collections.deque[int] = collections.deque(range(first, first + count))
        self._taken: set[int] = set()
        self._homes = run_dir / HOMES
        shutil.rmtree(self._homes, ignore_errors=True)  # a previous run's: no tenant lives yet

    def __contains__(self, uid: int) -> bool:
        return self.first <= uid < self.first + self.count

    @property
    def in_use(self) -> frozenset[int]:
        return frozenset(self._taken)

    def take(self) -> Identity | None:
        """A uid no live tenant has (None: all are taken)."""
        for _ in range(len(self._free)):
            uid = self._free.popleft()
            if end_processes_of(uid):
                self._free.append(uid)  # still dying: try it again later
                continue
            self._taken.add(uid)
            home = self._home(uid)
            return Identity(uid, self.group, home)
        return None

    def give_back(self, identity: Identity) -> None:
        if identity.uid not in self._taken:
            return
        self._taken.discard(identity.uid)
        end_processes_of(identity.uid)
        shutil.rmtree(identity.home, ignore_errors=True)
        self._free.append(identity.uid)

    def close(self) -> None:
        """At shutdown: every uid's leftovers end, the homes go."""
        for uid in list(self._taken):
            end_processes_of(uid)
        self._taken.clear()
        shutil.rmtree(self._homes, ignore_errors=True)

    def _home(self, uid: int) -> Path:
        self._homes.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self._homes, 0o711)  # tenants pass through to their own, never list
        home = self._homes / str(uid)
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(mode=0o700)
        os.chown(home, uid, uid)
        return home


def processes_of(uid: int) -> list[int]:
    """Pids of the processes with `uid` as their real, effective or saved uid
    (read from /proc/<pid>/status: the owner of /proc/<pid> is root's for a
    process that made itself non-dumpable)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if uid in (int(x) for x in line.split()[1:4]):
                            found.append(int(name))
                        break
        except (OSError, ValueError):
            pass
    return found


def end_processes_of(uid: int) -> bool:
    """SIGKILL whatever runs as `uid`; True if something did."""
    pids = processes_of(uid)
    process_tree.kill_all(pids)
    if pids:
        log.warning("uid %d: killed %d leftover process(es) %s", uid, len(pids), pids[:8])
    return bool(pids)
