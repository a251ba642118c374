"""Files a tenant writes to tell the runtime something about its command
(what auto-regions wrapped, its unprotected timings), one per command and
kind, in `<run_dir>/tenant-reports/`.

The runtime makes each file empty before the command starts, owned by the
user tenants run as and readable by it alone; the folder lets tenants reach
a file they know the name of but not list the others (0o710, the tenants'
group when they run as another user). A tenant only ever appends to its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from krex_runtime.node.access import RunAs

FOLDER = "tenant-reports"


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
        if user is not None:
            os.fchown(fd, user.uid, user.gid)
    finally:
        os.close(fd)
    return path
