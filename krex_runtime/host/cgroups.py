"""cgroup v2: a slice for the runtime's tenants and one cgroup per command.

A command's cgroup holds its whole process tree, including grandchildren that
start their own session or ignore SIGTERM, so ending a command is one write to
`cgroup.kill`. The freezer (`cgroup.freeze`) uses the same cgroups.

The slice lives below the runtime's own cgroup (a systemd unit with
Delegate=yes owns that subtree) and is named after the run folder, so a
restarted runtime finds what its previous run left.
"""

from __future__ import annotations

import errno
import hashlib
import os
import time
from pathlib import Path

# A cgroup that is gone or going: ENOENT once its folder is removed, ENODEV for
# a file opened (or a path resolved) while the kernel was removing it. Both
# mean the same to every caller: nothing runs in it any more.
GONE = (errno.ENOENT, errno.ENODEV)


def is_gone(exc: OSError) -> bool:
    return exc.errno in GONE


def read_file(path: Path) -> str | None:
    """A cgroup file's text; None when its cgroup is gone (other errors raise)."""
    try:
        return path.read_text()
    except OSError as exc:
        if is_gone(exc):
            return None
        raise


def write_file(path: Path, value: str) -> bool:
    """Write a cgroup file; False when its cgroup is gone (other errors raise)."""
    try:
        path.write_text(value)
    except OSError as exc:
        if is_gone(exc):
            return False
        raise
    return True


def find_cgroup2_mount() -> Path | None:
    """Where cgroup v2 is mounted: /sys/fs/cgroup on unified hosts,
    /sys/fs/cgroup/unified on hybrid ones."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return Path(left.split()[4])
    except OSError:
        return None
    return None


def find_v1_freezer_mount() -> Path | None:
    """Where the cgroup v1 freezer hierarchy is mounted, on hosts that have one."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = right.split()
                if fields and fields[0] == "cgroup" and "freezer" in fields[-1].split(","):
                    return Path(left.split()[4])
    except OSError:
        return None
    return None


def own_cgroup(controller: str = "", pid: int | str = "self") -> str:
    """A process's cgroup path (this one's by default; "/" when at the root):
    in the v2 hierarchy, or in the v1 hierarchy of `controller`."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            for line in f:
                hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
                v2_line = hierarchy == "0" and controllers == ""
                if (controller and controller in controllers.split(",")) or (not controller and v2_line):
                    return path or "/"
    except (OSError, ValueError):
        pass
    return "/"


def slice_path(run_dir: Path, version: int = 2) -> Path | None:
    """Where the slice of this run folder lives (whether or not it exists), or
    None where that hierarchy is not mounted."""
    mount = find_cgroup2_mount() if version == 2 else find_v1_freezer_mount()
    if mount is None:
        return None
    tag = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:10]
    own = own_cgroup() if version == 2 else own_cgroup("freezer")
    return mount / own.lstrip("/") / f"krex-{tag}"


class CgroupSlice:
    """The runtime's slice: creates, kills and removes per-command cgroups."""

    def __init__(self, path: Path, version: int = 2, mount: Path | None = None) -> None:
        self.path = path
        self.version = version  # 2: cgroup v2; 1: the v1 freezer hierarchy
        self.mount = mount  # where the hierarchy is mounted (to place other processes)

    @classmethod
    def open(cls, run_dir: Path, version: int = 2) -> CgroupSlice | None:
        """The slice for this run folder, or None where that hierarchy is not writable."""
        mount = find_cgroup2_mount() if version == 2 else find_v1_freezer_mount()
        path = slice_path(run_dir, version)
        if path is None:
            return None
        try:
            path.mkdir(exist_ok=True)
            probe = path / "probe"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError:
            return None
        return cls(path, version, mount)

    def cpu_usec(self, pid: int | None = None) -> int | None:
        """CPU time used so far (us, cgroup v2's cpu.stat): by the whole slice,
        or by the cgroup of process `pid` in it; None where it cannot say."""
        if self.version != 2 or self.mount is None:
            return None
        where = self.path if pid is None else self.mount / own_cgroup("", pid).lstrip("/")
        text = read_file(where / "cpu.stat")
        for line in (text or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                try:
                    return int(value)
                except ValueError:
                    return None
        return None

    def holds(self, pid: int) -> bool:
        """Whether the process is in this slice (in any command's cgroup)."""
        if self.mount is None:
            return False
        own = own_cgroup("freezer" if self.version == 1 else "", pid)
        return (self.mount / own.lstrip("/")).is_relative_to(self.path)

    def create(self, name: str) -> Path:
        path = self.path / name
        path.mkdir(exist_ok=True)
        return path

    def leftovers(self) -> list[Path]:
        """Command cgroups a previous run of this runtime left behind."""
        return sorted(p for p in self.path.iterdir() if p.is_dir())

    def remove(self) -> None:
        """End every command cgroup in the slice and remove it. A few passes:
        a command that was starting while the first pass ran may have made its
        cgroup after it."""
        for _ in range(3):
            for child in self.leftovers() if self.path.is_dir() else []:
                kill_and_remove(child)
            try:
                self.path.rmdir()
                return
            except OSError as exc:
                if is_gone(exc):
                    return


def procs(cgroup: Path) -> list[int]:
    try:
        return [int(x) for x in (read_file(cgroup / "cgroup.procs") or "").split()]
    except (OSError, ValueError):
        return []


def populated(cgroup: Path) -> bool:
    try:
        text = read_file(cgroup / "cgroup.events")
    except OSError:
        text = ""  # cgroup v1 has no cgroup.events: its member list says it
    if text is None:
        return False  # gone, or going: nothing can run in it
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "populated":
            return value.strip() == "1"
    return bool(procs(cgroup))


def kill(cgroup: Path) -> None:
    """SIGKILL every process in the cgroup and below (cgroup.kill, Linux >= 5.14;
    signalling each member where that file is missing)."""
    if not (cgroup / "cgroup.kill").exists():
        pass  # before Linux 5.14: signal each member below
    else:
        try:
            write_file(cgroup / "cgroup.kill", "1")  # False: gone, nothing left to kill
            return
        except OSError:
            pass  # cannot write it: signal each member below
    for _ in range(10):  # members may fork while being signalled
        members = procs(cgroup)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def kill_and_remove(cgroup: Path, timeout_s: float = 5.0) -> bool:
    """Kill the cgroup's processes and remove it; False if it is still populated."""
    thaw(cgroup)
    kill(cgroup)
    deadline = time.monotonic() + timeout_s
    while populated(cgroup) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        cgroup.rmdir()
    except OSError as exc:
        return is_gone(exc)
    return True


def thaw(cgroup: Path) -> None:
    """Leave nothing frozen (a v1-frozen process does not even die of SIGKILL
    until thawed)."""
    for name, value in (("cgroup.freeze", "0"), ("freezer.state", "THAWED")):
        try:
            (cgroup / name).write_text(value)
        except OSError:
            pass
