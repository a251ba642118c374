"""The node's compile slots: `<run_dir>/compile-slots/` holds files 0..N-1,
and whoever compiles (the evaluation harness, in a tenant) holds an flock on
one of them for as long as it compiles, so at most N compiles run at once on
the node (`eval.max_compiles`; docs/configuration.md, "[eval]").

The files are the runtime's (0644) in a folder tenants may enter and list but
not write (0755): a lock needs only a descriptor opened for reading, and no
tenant can add a slot, remove one, or swap one for a file of its own. The
folder is made afresh at each start: a slot locked by a tenant of an earlier
run is a new file now, and a smaller N leaves no stale file behind.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

FOLDER = "compile-slots"


def make_slots(run_dir: Path, count: int) -> Path:
    """Create the slot folder with `count` files and return it."""
    folder = run_dir / FOLDER
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)  # whatever the umask
    for index in range(count):
        fd = os.open(folder / str(index), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        os.fchmod(fd, 0o644)
        os.close(fd)
    return folder


def tenant_core_count(cores: dict[int, tuple[int, ...]]) -> int:
    """The cores tenants may run on, node-wide: every GPU's tenant cores
    together (the region holders' reserved cores are in none), or, where
    no CPU plan was made (`cores` empty: no policy krex), every core the
    runtime may use."""
    together = {c for listed in cores.values() for c in listed}
    return len(together) if together else len(os.sched_getaffinity(0))
