"""Node-wide claims: one runtime per GPU, one runtime per run folder.

flock locks die with their holder, so a killed runtime never leaves a claim
that blocks its restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class ClaimError(Exception):
    pass


class Claim:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def claim(path: Path, what: str, owner_info: str) -> Claim:
    """Take an exclusive lock on `path` or raise ClaimError naming the holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise ClaimError(f"{what} is already claimed by {holder} (lock {path})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, owner_info.encode(), 0)
    return Claim(path, fd)
