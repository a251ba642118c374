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
tenant never meets a former one's leftovers. Then what the uid owns where
every user may write (/dev/shm, /tmp, /var/tmp, message queues, System V
IPC: host/uid_leftovers.py) is removed, on a thread of its own so that
a tenant that left a million files cannot stall the runtime's loop; the uid
is not handed out before that sweep has ended (`take` prefers another free
uid, and waits for it only when none is left). At start and at shutdown the
whole range is swept once, for what a runtime that died left behind. Uids
come back to the end of the line: the one handed out next is the one free
the longest.

Each tenant also gets a home of its own, `<run_dir>/tenant-homes/<uid>`,
made empty when the uid is handed out and removed when it comes back.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from krex_runtime.host import process_tree, uid_leftovers

log = logging.getLogger("krex.identities")

HOMES = "tenant-homes"
# How long a uid's killed processes get to be gone before its sweep starts
# (one still exiting could finish a last file creation after the sweep).
DEATH_WAIT_S = 5.0


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
        self._sweeping: dict[int, Future[None]] = {}  # uid -> its sweep, until it is handed out
        self._sweeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="krex-uid-sweep")
        self._closed = False
        self._homes = run_dir / HOMES
        shutil.rmtree(self._homes, ignore_errors=True)  # a previous run's: no tenant lives yet
        self.sweep_all()  # what tenants of a runtime that died left behind

    def __contains__(self, uid: int) -> bool:
        return self.first <= uid < self.first + self.count

    @property
    def in_use(self) -> frozenset[int]:
        return frozenset(self._taken)

    @property
    def uids(self) -> range:
        return range(self.first, self.first + self.count)

    def take(self) -> Identity | None:
        """A uid no live tenant has, swept clean (None: all are taken)."""
        for _ in range(len(self._free)):
            uid = self._free.popleft()
            sweeping = self._sweeping.get(uid)
            if sweeping is not None and not sweeping.done():
                self._free.append(uid)  # its sweep goes on: another one first
                continue
            if end_processes_of(uid):
                self._sweep_later(uid)  # something ran as it again: kill, then sweep again
                self._free.append(uid)
                continue
            return self._hand_out(uid)
        # Every free uid is being swept: the one free the longest, once its sweep has ended.
        for uid in list(self._free):
            sweeping = self._sweeping.get(uid)
            if sweeping is not None:
                sweeping.result()
                if not end_processes_of(uid):
                    self._free.remove(uid)
                    return self._hand_out(uid)
        return None

    def give_back(self, identity: Identity) -> None:
        if identity.uid not in self._taken:
            return
        self._taken.discard(identity.uid)
        end_processes_of(identity.uid)
        shutil.rmtree(identity.home, ignore_errors=True)
        self._sweep_later(identity.uid)
        self._free.append(identity.uid)

    def close(self) -> None:
        """At shutdown: every uid's leftovers end, the homes go."""
        for uid in list(self._taken):
            end_processes_of(uid)
        self._taken.clear()
        self._closed = True
        self._sweeper.shutdown(wait=True)
        self._sweeping.clear()
        _wait_gone(self.uids)
        self.sweep_all()
        shutil.rmtree(self._homes, ignore_errors=True)

    def sweep_all(self) -> uid_leftovers.Swept:
        """Remove what any uid of the range owns in the shared places, in one walk
        (at start and at shutdown: no tenant runs then)."""
        return uid_leftovers.sweep(self.uids, self.uids, self.group)

    def _hand_out(self, uid: int) -> Identity:
        self._sweeping.pop(uid, None)
        self._taken.add(uid)
        return Identity(uid, self.group, self._home(uid))

    def _sweep_later(self, uid: int) -> None:
        if self._closed:
            return  # close() sweeps the whole range
        def sweep() -> None:
            try:
                _wait_gone({uid})
                uid_leftovers.sweep([uid], self.uids, self.group)
            except Exception:  # never lose the uid to a failed sweep: it is logged, the uid serves on
                log.exception("uid %d: sweeping its leftovers failed", uid)

        self._sweeping[uid] = self._sweeper.submit(sweep)

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
    return [pid for pid, _ in _processes_of_any({uid})]


def _processes_of_any(uids: set[int] | range) -> list[tuple[int, bool]]:
    """(pid, is a zombie) of every process running as one of `uids`, in one pass over /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        zombie = False
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"State:"):
                        zombie = line.split()[1:2] == [b"Z"]
                    elif line.startswith(b"Uid:"):
                        if any(int(x) in uids for x in line.split()[1:4]):
                            found.append((int(name), zombie))
                        break
        except (OSError, ValueError):
            pass
    return found


def _wait_gone(uids: set[int] | range) -> None:
    """Until nothing runs as `uids` (SIGKILLed already; a zombie creates no
    file), DEATH_WAIT_S at most."""
    deadline = time.monotonic() + DEATH_WAIT_S
    while any(not zombie for _, zombie in _processes_of_any(uids)) and time.monotonic() < deadline:
        time.sleep(0.01)


def end_processes_of(uid: int) -> bool:
    """SIGKILL whatever runs as `uid`; True if something did."""
    pids = processes_of(uid)
    process_tree.kill_all(pids)
    if pids:
        log.warning("uid %d: killed %d leftover process(es) %s", uid, len(pids), pids[:8])
    return bool(pids)
