"""Each tenant's build folders: where a command's compiles keep their cache
(`TORCH_EXTENSIONS_DIR`, `TRITON_CACHE_DIR`), private to whom it runs for.

A compile cache is code a later command loads, so a poisoned one must not
reach another submitter. The boundary is the command's fair-share key
(`<submitter>/<key>`): the submitter by the kernel's word and the key it
chose. Not the uid: with `tenants.uid_range` a uid is one command's, and is
handed to another submitter's command after it.

    <root>/             the runtime's, 0711: tenants pass through, never list
      <key name>/       the runtime's, 0711
        0/ 1/ ...       one per command of the key running at once, 0700:
                        its uid's while a command holds it, the runtime's after

A command takes the lowest folder of its key that no running command holds
(`reserve`, then `prepare`) and gives it back when it ends (`give_back`). Taking makes the
folder and what a tenant uid owns in it the command's uid's; giving back
makes the folder itself the runtime's again, so the uid's next holder (any
submitter's command) cannot enter it and the sweep of that uid's leftovers
(host/uid_leftovers.py) never reaches it, wherever `eval.build_dir` lies.
A file with more than one link is never handed over: one linked to someone
else's file would become the tenant's. docs/configuration.md, "Build folders".
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("krex.builds")

FOLDER = "tenant-builds"  # under the run dir when eval.build_dir is ""
TORCH = "TORCH_EXTENSIONS_DIR"
TRITON = "TRITON_CACHE_DIR"
JOBS = "MAX_JOBS"
# How deep handing over goes; a tree deeper than this keeps its deeper entries' owners.
MAX_DEPTH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class BuildFolder:
    key: str  # the fair-share key it belongs to
    index: int
    path: Path

    def environment(self, jobs: int) -> dict[str, str]:
        return {TORCH: str(self.path / "torch_extensions"), TRITON: str(self.path / "triton"), JOBS: str(jobs)}


class BuildFolders:
    def __init__(self, root: Path, tenant_uids: Collection[int], jobs: int, fresh: bool = False,
                 command_wins: bool = False) -> None:
        """`tenant_uids`: the uids a tenant may run as (whose entries may be handed over)."""
        self.root, self.jobs, self.fresh, self.command_wins = root, jobs, fresh, command_wins
        self._tenant_uids = tenant_uids
        self._held: dict[str, set[int]] = {}  # key -> indices held by running commands
        self._owner: dict[Path, int] = {}  # folder -> the uid everything in it was last handed to
        self._runtime = (os.getuid(), os.getgid())
        root.parent.mkdir(parents=True, exist_ok=True)
        _own_folder(root)

    def reserve(self, key: str) -> BuildFolder:
        """The key's lowest folder no running command holds, held from now on
        (on the runtime's loop: two commands of one key never get the same)."""
        held = self._held.setdefault(key, set())
        index = next(i for i in range(len(held) + 1) if i not in held)
        held.add(index)
        return BuildFolder(key, index, self.root / _name_of(key) / str(index))

    def prepare(self, folder: BuildFolder, uid: int, gid: int) -> None:
        """Make the reserved folder `uid`'s (blocking: call it off the loop);
        OSError when it cannot be, the folder still to be given back."""
        _own_folder(folder.path.parent)
        self._prepare(folder.path, uid, gid)

    def give_back(self, folder: BuildFolder) -> None:
        """After its command: the folder is the runtime's, closed to every tenant."""
        self._held.get(folder.key, set()).discard(folder.index)
        try:
            fd = os.open(folder.path, _DIR_FLAGS)
            try:
                os.fchmod(fd, 0o700)
                if os.fstat(fd).st_uid != self._runtime[0]:
                    os.fchown(fd, *self._runtime)
            finally:
                os.close(fd)
        except OSError as exc:  # logged: the next command to take it makes it its own
            log.warning("build folder %s: %s", folder.path, exc.strerror)

    def apply(self, env: dict[str, str], command_env: dict[str, str], folder: BuildFolder | None) -> dict[str, str]:
        """A tenant's environment with its build folder and MAX_JOBS in it."""
        if folder is None:
            return env
        for name, value in folder.environment(self.jobs).items():
            if not (self.command_wins and name in command_env):
                env[name] = value
        return env

    def _prepare(self, path: Path, uid: int, gid: int) -> None:
        if self.fresh:
            shutil.rmtree(path, ignore_errors=True)
            self._owner.pop(path, None)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        fd = os.open(path, _DIR_FLAGS)
        try:
            last = self._owner.get(path)
            if last != uid:
                # The last holder's entries become this one's; any other tenant's (one the last
                # holder let in, this uid's under an earlier holder included) go. Unknown (a new
                # run): every other tenant uid's are handed over.
                tenants = set(self._tenant_uids)
                _hand_over(fd, (uid, gid), {last} if last is not None else tenants - {uid},
                           tenants - {last} if last is not None else set(), 0)
                self._owner[path] = uid
            for sub in ("torch_extensions", "triton"):
                try:
                    os.mkdir(sub, 0o700, dir_fd=fd)
                    _chown_at(fd, sub, uid, gid)
                except FileExistsError:
                    pass
            # The folder itself last: until now it was the runtime's and closed.
            os.fchmod(fd, 0o700)
            if (uid, gid) != self._runtime:
                os.fchown(fd, uid, gid)
        finally:
            os.close(fd)


def _name_of(key: str) -> str:
    """A folder name for a share key: readable, and unique by its hash."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", key)[:40]
    return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _own_folder(path: Path) -> None:
    """A folder of the runtime's that tenants pass through but cannot list; a
    link or a file in its place is refused (OSError)."""
    try:
        os.mkdir(path, 0o711)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(f"{path} is not a folder of the runtime's own")
    os.chmod(path, 0o711)


def _chown_at(fd: int, name: str, uid: int, gid: int) -> None:
    if os.getuid() == 0:
        os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)


def _hand_over(fd: int, owner: tuple[int, int], from_uids: set[int], strangers: set[int], depth: int) -> None:
    """Under the folder `fd`: make what `from_uids` own `owner`'s (folders, and
    files of one link: another link could be to someone else's file, and that
    name goes instead), and remove what `strangers` own. Links are never followed."""
    if os.getuid() != 0 or not (from_uids or strangers) or depth > MAX_DEPTH:
        return
    for name in os.listdir(fd):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if st.st_uid in strangers:
                _remove_at(fd, name, st)
            elif st.st_uid not in from_uids or stat.S_ISLNK(st.st_mode):
                continue
            elif stat.S_ISDIR(st.st_mode):
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                try:
                    if (os.fstat(sub).st_dev, os.fstat(sub).st_ino) == (st.st_dev, st.st_ino):
                        _hand_over(sub, owner, from_uids, strangers, depth + 1)
                        os.fchown(sub, *owner)
                finally:
                    os.close(sub)
            elif st.st_nlink == 1:
                os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
            else:
                os.unlink(name, dir_fd=fd)
        except OSError as exc:  # one entry that changed under the walk: the rest are still handed over
            log.warning("build folder entry %s: %s", name, exc.strerror)


def _remove_at(fd: int, name: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=fd)  # by descriptors, never following a link
    else:
        os.unlink(name, dir_fd=fd)
