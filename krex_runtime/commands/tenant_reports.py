"""Files a tenant writes to tell the runtime something about its command
(what auto-regions wrapped, its unprotected timings), one per command and
kind, in `<run_dir>/tenant-reports/`.

The runtime makes each file empty when the command is submitted, owned by
the user tenants run as and readable by it alone; with `tenants.uid_range`
it stays the runtime's until the command starts and is then handed over to
the command's own uid (`hand_over`), so no other tenant can write it. The
folder lets tenants reach a file they know the name of but not list the
others (0o710, the tenants' group when they run as another user). A tenant
only ever appends to its own.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from typing import TYPE_CHECKING

from krex_runtime.commands.identities import Identity
from krex_runtime.node.access import RunAs

if TYPE_CHECKING:
    from krex_runtime.commands.job import Job

FOLDER = "tenant-reports"
log = logging.getLogger("krex.commands")


def report_file(run_dir: Path, run_as: RunAs | None, name: str) -> Path:
    folder = run_dir / FOLDER
    folder.mkdir(exist_ok=True)
    user = run_as.user if run_as is not None else None
    if user is not None:
        os.chown(folder, -1, user.gid)
    os.chmod(folder, 0o710 if user is not None else 0o700)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        if user is not None and user.uids is None:
            os.fchown(fd, user.uid, user.gid)
    finally:
        os.close(fd)
    return path


def hand_over(job: Job, identity: Identity | None) -> None:
    """The command's report files become its own uid's, as it starts."""
    if identity is None:
        return
    for path in (job.auto_region_report, job.unprotected_path):
        if path is not None:
            try:
                os.chown(path, identity.uid, identity.gid, follow_symlinks=False)
            except OSError as exc:  # the command runs; it cannot report this fact
                log.warning("cannot hand %s to uid %d: %s", path, identity.uid, exc.strerror)
