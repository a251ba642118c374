"""What a tenant's uid leaves behind where every user may write: files and
folders in /dev/shm, /tmp and /var/tmp, POSIX message queues (/dev/mqueue,
where it is mounted) and System V shared memory, message queues and
semaphore sets. A uid is handed to one tenant after another
(host/identities.py); whatever the last one left there, a 0600 file
included, would be the next one's to read, so it goes before the uid is
handed out again.

Only what belongs to the uids being swept is removed:

- Each place is walked through folder descriptors (openat with O_NOFOLLOW):
  a symbolic link is never followed, and a folder swapped for a link
  halfway through the walk is not entered. A link owned by the uid is
  removed as a link.
- An entry is removed only when its own owner (lstat, not its target's) is
  a swept uid. A swept uid's folder loses the swept uids' entries and goes
  when nothing is left in it. What others put in it stays; the folder then
  stays too, made root's and closed (0700), as does one nested too deep to
  empty, so no later holder of the uid reaches what it holds.
- The walk stays on each place's own file system (`find -xdev`), and enters
  only folders a tenant could have entered: those of a tenant uid, and those
  open to a tenant by their group or other bits. A folder closed to every
  tenant (a private folder of root's or of another user) cannot hold a
  tenant's entry unless its owner let one in.
- A System V object goes when a swept uid owns or created it.

The processes of the uid must have ended first: a live one could put back
what the sweep just removed.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("krex.identities")

PLACES = (Path("/dev/shm"), Path("/tmp"), Path("/var/tmp"), Path("/dev/mqueue"))
SYSV = Path("/proc/sysvipc")
IPC_RMID = 0
_ID_COLUMN = {"shm": "shmid", "msg": "msqid", "sem": "semid"}
# How deep the walk goes into a swept uid's nested folders (each level holds a
# descriptor and a few stack frames); one deeper is closed rather than emptied.
MAX_DEPTH = 128

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)


@dataclass
class Swept:
    """What one sweep removed, and what it could not."""

    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.removed or self.failed)


def sweep(uids: Collection[int], tenant_uids: range, tenant_group: int,
          places: tuple[Path, ...] = PLACES) -> Swept:
    """Remove what `uids` own in the node's shared places and System V IPC.
    `tenant_uids` and `tenant_group` say which folders a tenant could enter."""
    swept = Swept()
    owners = frozenset(uids)
    if not owners:
        return swept

    def enterable(st: os.stat_result) -> bool:
        if st.st_uid in tenant_uids:
            return True
        mode = st.st_mode
        return bool(mode & stat.S_IXOTH) or bool(
            mode & stat.S_IXGRP and (st.st_gid == tenant_group or st.st_gid in tenant_uids))

    for place in places:
        try:
            fd = os.open(place, _DIR_FLAGS)
        except OSError:
            continue  # not on this node (no /dev/mqueue mounted)
        try:
            _walk(fd, str(place), os.fstat(fd).st_dev, owners, enterable, swept, 0)
        finally:
            os.close(fd)
    _sweep_sysv(owners, swept)
    if swept.removed:
        log.warning("uids %s: removed %d leftover(s): %s", sorted(owners)[:8], len(swept.removed),
                    ", ".join(swept.removed[:8]))
    for line in swept.failed[:8]:
        log.warning("cannot remove a tenant's leftover: %s", line)
    return swept


def _walk(fd: int, where: str, device: int, owners: frozenset[int],
          enterable: Callable[[os.stat_result], bool], swept: Swept, depth: int) -> bool:
    """Remove the owners' entries under the folder `fd` (at `where`); True
    when the folder is left empty."""
    try:
        names = os.listdir(fd)
    except OSError as exc:
        swept.failed.append(f"{where}: {exc.strerror}")
        return False
    empty = True
    for name in names:
        path = f"{where}/{name}"
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            swept.failed.append(f"{path}: {exc.strerror}")
            empty = False
            continue
        owned = st.st_uid in owners
        if not stat.S_ISDIR(st.st_mode):
            if owned and _unlink(fd, name, path, swept):
                continue
            empty = False
        elif st.st_dev != device:
            empty = False  # another file system mounted here: not this place's
        elif owned:
            if not _remove_folder(fd, name, path, st, device, owners, enterable, swept, depth):
                empty = False
        else:
            if enterable(st):
                below = functools.partial(_walk, where=path, device=device, owners=owners, enterable=enterable,
                                          swept=swept, depth=depth + 1)
                _enter(fd, name, path, st, below, swept)
            empty = False
    return empty


def _unlink(fd: int, name: str, path: str, swept: Swept) -> bool:
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return True
    except OSError as exc:
        swept.failed.append(f"{path}: {exc.strerror}")
        return False
    swept.removed.append(path)
    return True


def _remove_folder(fd: int, name: str, path: str, st: os.stat_result, device: int, owners: frozenset[int],
                   enterable: Callable[[os.stat_result], bool], swept: Swept, depth: int) -> bool:
    """Empty a swept uid's folder of the swept uids' entries and remove it.
    One that cannot go (another's entry in it, nested too deep) is made
    root's and closed (0700), so no later holder of the uid can reach what
    it holds; True when it went."""
    if depth < MAX_DEPTH:
        emptied = _enter(fd, name, path, st, lambda sub: _walk(sub, path, device, owners, enterable, swept, depth + 1),
                         swept)
        if emptied:
            try:
                os.rmdir(name, dir_fd=fd)
                swept.removed.append(path + "/")
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # refilled by someone else meanwhile
                    swept.failed.append(f"{path}: {exc.strerror}")
    if _enter(fd, name, path, st, _close_to_tenants, swept):
        swept.failed.append(f"{path}: could not be emptied; made root's (0700)")
    return False


def _close_to_tenants(fd: int) -> bool:
    os.fchmod(fd, 0o700)
    os.fchown(fd, 0, 0)
    return True


def _enter(parent: int, name: str, path: str, seen: os.stat_result, then: Callable[[int], bool],
           swept: Swept) -> bool:
    """`then` on the folder `name` of `parent`, opened without following a link
    and only if it is still the folder `seen` described; False if it is not."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:  # a link put in its place, or gone: nothing to follow
        if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            swept.failed.append(f"{path}: {exc.strerror}")
        return False
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
            return False  # replaced between the look and the open: not the folder judged
        return then(fd)
    except OSError as exc:
        swept.failed.append(f"{path}: {exc.strerror}")
        return False
    finally:
        os.close(fd)


# --- System V IPC --------------------------------------------------------------

def _sweep_sysv(owners: frozenset[int], swept: Swept) -> None:
    """Shared memory segments, message queues and semaphore sets that a swept
    uid owns or created (an owner can give an object away, never its creator)."""
    libc = None
    for kind in ("shm", "msg", "sem"):
        for ident in sysv_objects(kind, owners):
            if libc is None:
                libc = ctypes.CDLL(None, use_errno=True)
            if kind == "shm":
                rc = libc.shmctl(ctypes.c_int(ident), IPC_RMID, None)
            elif kind == "msg":
                rc = libc.msgctl(ctypes.c_int(ident), IPC_RMID, None)
            else:
                rc = libc.semctl(ctypes.c_int(ident), 0, IPC_RMID, 0)
            err = ctypes.get_errno()
            if rc == 0:
                swept.removed.append(f"System V {kind} {ident}")
            elif err not in (errno.EINVAL, errno.EIDRM):  # already gone
                swept.failed.append(f"System V {kind} {ident}: {os.strerror(err)}")


def sysv_objects(kind: str, owners: Collection[int]) -> list[int]:
    """Ids of the System V objects of `kind` (shm, msg, sem) that one of
    `owners` owns or created ([] where /proc/sysvipc cannot be read)."""
    try:
        lines = (SYSV / kind).read_text().splitlines()
    except OSError:
        return []
    if not lines:
        return []
    header = lines[0].split()
    try:
        at_id, at_uid, at_cuid = header.index(_ID_COLUMN[kind]), header.index("uid"), header.index("cuid")
    except ValueError:
        return []
    found = []
    for line in lines[1:]:
        cols = line.split()
        try:
            if int(cols[at_uid]) in owners or int(cols[at_cuid]) in owners:
                found.append(int(cols[at_id]))
        except (IndexError, ValueError):
            continue
    return found
