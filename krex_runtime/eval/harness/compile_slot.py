"""One of the node's compile slots, held while the candidate compiles.

The runtime makes `KREX_COMPILE_SLOTS=<dir>` with one file per slot (mode
0644, its own): a slot is an exclusive flock on a read-only descriptor of one
file, so a tenant holds it without being able to write anything, and the
kernel lets it go when the process ends however it ends. Every file is tried
without blocking first; when all are taken, the wait is on one picked by the
process id (so waiters spread over the slots). Without the variable there is
no limit and no wait.
"""

from __future__ import annotations

import fcntl
import os
import time
from types import TracebackType

ENV = "KREX_COMPILE_SLOTS"


class CompileSlot:
    """`with CompileSlot() as slot:` holds a slot for the block; `slot.wait_s`
    is how long taking it took, `slot.path` which one (None: no limit)."""

    def __init__(self, folder: str | None = None) -> None:
        self.folder = os.environ.get(ENV) if folder is None else folder
        self.path: str | None = None
        self.wait_s = 0.0
        self._fd: int | None = None

    def _files(self) -> list[str]:
        assert self.folder
        names = sorted(os.listdir(self.folder), key=lambda n: (len(n), n))
        files = [os.path.join(self.folder, n) for n in names]
        return [f for f in files if os.path.isfile(f)]

    def _try(self, path: str, blocking: bool) -> bool:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd, self.path = fd, path
        return True

    def acquire(self) -> None:
        if not self.folder:
            return
        started = time.monotonic()
        files = self._files()
        if not files:
            raise OSError(f"{ENV}={self.folder} holds no slot file")
        if not any(self._try(f, blocking=False) for f in files):
            self._try(files[os.getpid() % len(files)], blocking=True)
        self.wait_s = time.monotonic() - started

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file drops its flock
            self._fd = None

    def __enter__(self) -> CompileSlot:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
