"""A recycled uid hands nothing of one tenant to the next (`tenants.uid_range`).

A real runtime as root with a single tenant uid, so every command runs as
the same one. The first leaves what a tenant can leave where every user may
write: a 0600 secret in /dev/shm, nested folders in /tmp, a file in /var/tmp,
a file in a folder of root's open to all, a link to a file of root's, a
System V shared memory segment, and a folder of its own that root put a
file in while it ran. The next command, on the same uid, finds none of it;
what is not the uid's (root's file in its folder, the link's target, root's
own files in /tmp) is untouched. What a previous run's tenant left is gone
once the runtime has started.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from krex_runtime.host import uid_leftovers
from krex_runtime.testing.local_runtime import wait_until

UID, GROUP = 62100, 60999  # no account; not the range of test_tenant_identity
PYTHON = "/usr/bin/python3"  # the runtime's own Python may sit where other uids cannot reach

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path(PYTHON).exists(), reason=f"needs root and {PYTHON}"
)

LEAVE = r"""
import ctypes, json, os, sys, time
tok = sys.argv[1]
with open(f"/dev/shm/{tok}-secret", "w") as f:
    f.write("SECRET")
os.chmod(f"/dev/shm/{tok}-secret", 0o600)
os.makedirs(f"/tmp/{tok}-dir/a/b")
with open(f"/tmp/{tok}-dir/a/b/file", "wb") as f:
    f.write(b"x" * 50_000)
with open(f"/var/tmp/{tok}-file", "wb") as f:
    f.write(b"y" * 50_000)
with open(f"/tmp/{tok}-public/mine", "w") as f:
    f.write("in a folder of root's")
os.symlink(f"/tmp/{tok}-roots", f"/tmp/{tok}-link")
os.mkdir(f"/tmp/{tok}-shared", 0o777)
os.chmod(f"/tmp/{tok}-shared", 0o777)
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
print(json.dumps({"uid": os.getuid(), "shm": shm}), flush=True)
while not os.path.exists(f"/tmp/{tok}-go"):
    time.sleep(0.02)
"""

LOOK = r"""
import errno, json, os, sys
tok = sys.argv[1]
found = {"uid": os.getuid()}
try:
    open(f"/dev/shm/{tok}-secret").read()
    found["secret"] = "read"
except OSError as exc:
    found["secret"] = errno.errorcode[exc.errno]
mine = []
for place in ("/dev/shm", "/tmp", "/var/tmp"):
    for name in os.listdir(place):
        if os.lstat(f"{place}/{name}").st_uid == os.getuid():
            mine.append(f"{place}/{name}")
found["mine"] = mine
print(json.dumps(found))
"""


@pytest.fixture
def tok() -> Iterator[str]:
    tok = f"uid-leftover-{secrets.token_hex(4)}"
    yield tok
    for place in ("/dev/shm", "/tmp", "/var/tmp"):
        for path in Path(place).glob(f"{tok}*"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _planted(path: Path, uid: int, text: str = "old") -> Path:
    path.write_text(text)
    os.chown(path, uid, uid)
    return path


def test_the_next_tenant_on_a_uid_finds_nothing_of_the_last(open_root: Path, tok: str, make_runtime: Any) -> None:
    old = _planted(Path(f"/dev/shm/{tok}-previous-run"), UID)  # a tenant of a runtime that died
    roots = _planted(Path(f"/tmp/{tok}-roots"), 0, "root's")
    public = Path(f"/tmp/{tok}-public")
    public.mkdir()
    public.chmod(0o777)

    rt = make_runtime(parent=open_root, policy="krex", sim=1, slots=1,
                      tenants_extra=f"uid_range = [{UID}, 1]\ngroup = \"{GROUP}\"\n")
    assert not old.exists()

    first = rt.krex("submit", "--", PYTHON, "-c", LEAVE, tok).stdout.strip()
    out = rt.run_dir / "output" / f"{first}.stdout"
    wait_until(lambda: out.exists() and out.read_text().strip(), 60, "the first command to leave its files")
    left = json.loads(out.read_text().splitlines()[0])
    assert left["uid"] == UID and left["shm"] >= 0
    shared = Path(f"/tmp/{tok}-shared")
    _planted(shared / "roots-in-it", 0, "root's, in the tenant's folder")
    Path(f"/tmp/{tok}-go").touch()
    assert rt.krex("wait", first).returncode == 0

    theirs = [Path(f"/dev/shm/{tok}-secret"), Path(f"/tmp/{tok}-dir"), Path(f"/var/tmp/{tok}-file"),
              public / "mine", Path(f"/tmp/{tok}-link")]
    wait_until(lambda: not any(os.path.lexists(p) for p in theirs), 30, "the first command's files to go")
    assert left["shm"] not in uid_leftovers.sysv_objects("shm", [UID])

    done = rt.krex("run", "--", PYTHON, "-c", LOOK, tok)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"uid": UID, "secret": "ENOENT", "mine": []}
    # What is not the uid's stays: root's file and the link's target; the tenant's
    # folder that holds root's file is root's now, closed to every tenant.
    assert roots.read_text() == "root's" and public.is_dir()
    assert (shared / "roots-in-it").read_text() == "root's, in the tenant's folder"
    st = shared.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700)


def test_a_sweep_removes_only_the_uids_own_and_follows_no_link(tmp_path: Path) -> None:
    """The sweep on its own, in a place of the test's: a link of the uid's to
    root's folder is removed as a link, root's entries in the uid's folder
    stay (the folder is closed), a folder nested past the walk's depth is
    closed, and a private folder of root's is not entered."""
    place = tmp_path / "place"
    place.mkdir()
    place.chmod(0o1777)
    uid = UID + 1
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = _planted(outside / "victim", uid)  # the uid's, but out of the place: not reached through the link
    link = place / "link"
    link.symlink_to(outside)
    os.lchown(link, uid, uid)
    mine = _planted(place / "mine", uid)
    other = _planted(place / "other", uid + 1)
    folder = place / "folder"
    folder.mkdir()
    os.chown(folder, uid, uid)
    _planted(folder / "mine", uid)
    roots = _planted(folder / "roots", 0)
    private = place / "private"
    private.mkdir(mode=0o700)
    hidden = _planted(private / "mine", uid)
    deep = place / "deep"
    path = deep
    for _ in range(uid_leftovers.MAX_DEPTH + 3):
        path.mkdir()
        os.chown(path, uid, uid)
        path = path / "d"

    swept = uid_leftovers.sweep([uid], range(uid, uid + 1), GROUP, places=(place,))
    assert not os.path.lexists(link) and not mine.exists() and not (folder / "mine").exists()
    assert victim.exists() and other.exists() and roots.exists() and hidden.exists()
    assert (folder.stat().st_uid, stat.S_IMODE(folder.stat().st_mode)) == (0, 0o700)
    assert (deep.stat().st_uid, stat.S_IMODE(deep.stat().st_mode)) == (0, 0o700)
    assert any("could not be emptied" in line for line in swept.failed)
