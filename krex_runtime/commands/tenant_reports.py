"""What a tenant tells the runtime about its command (what auto-regions
wrapped, its unprotected timings), one report per command and kind, each a
named pipe in `<run_dir>/tenant-reports/` that the runtime reads as the
tenant writes.

A pipe, not a file: nothing a tenant writes stays on the runtime's disk (the
run folder is often a RAM-backed /run), so a tenant that writes megabytes
costs the runtime a read, never the space. The runtime keeps at most
`MAX_KEPT_BYTES` of a report (auto-regions lists what it wrapped, a line
each) and counts the bytes of all of it (one byte per timing the
interception library counted), and of one it tallies, the bytes of one value
apart (`t`: an untracked timing, commands/unprotected.py).

The runtime makes each pipe as its command starts and holds it open (read
and write, non-blocking), so a tenant's open never waits; it drains it
from the event loop, a bounded amount per turn so that a tenant writing
without pause cannot starve the loop. When the command finishes the pipe is
removed, then read to the end and closed, so nothing the command wrote is
lost and nothing is left; what a runtime that died left is removed at the
next start. Each pipe is the runtime's, writable by the command's group
alone (its uid's own group with `tenants.uid_range`, else the tenants'
user's; 0620) and read by no tenant. The folder lets tenants reach a pipe
they know the name of but not list the others (0o710, the tenants' group).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from krex_runtime.host.identities import Identity
from krex_runtime.node.access import RunAs

FOLDER = "tenant-reports"
MAX_KEPT_BYTES = 1 << 16  # what the runtime keeps of one report; the rest is counted, not kept
READ_BYTES = 1 << 16
READS_PER_TURN = 16  # per report and loop turn: a report of a tenant that never stops shares the loop
log = logging.getLogger("krex.commands")


@dataclass
class Report:
    """What the runtime read of one report."""

    kept: bytes = b""  # its first MAX_KEPT_BYTES (of one kept at all)
    size: int = 0  # every byte written to it
    tallied: int = 0  # those of them equal to the report's tally byte (of one tallied at all)


class _Pipe:
    def __init__(self, path: Path, fd: int, keep: bool, tally: bytes = b"") -> None:
        self.path, self.fd = path, fd
        self.report = Report()
        self._kept = bytearray()
        self._keep = keep
        self._tally = tally
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: read when closed
        self._loop.add_reader(self.fd, self.drain, READS_PER_TURN)

    def drain(self, reads: int | None = None) -> None:
        n = 0
        while reads is None or n < reads:
            n += 1
            try:
                data = os.read(self.fd, READ_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("reading the tenant report %s: %s", self.path.name, exc.strerror)
                return
            if not data:
                return
            self.report.size += len(data)
            if self._tally:
                self.report.tallied += data.count(self._tally)
            if self._keep and len(self._kept) < MAX_KEPT_BYTES:
                self._kept += data[: MAX_KEPT_BYTES - len(self._kept)]

    def close(self) -> Report:
        """No more of it: the pipe goes (no tenant can open it again), what was
        written to it is read, and its descriptor closes."""
        self.path.unlink(missing_ok=True)
        if self._loop is not None:
            self._loop.remove_reader(self.fd)
        self.drain()
        os.close(self.fd)
        self.report.kept = bytes(self._kept)
        return self.report


def remove_left(run_dir: Path) -> list[str]:
    """The reports a runtime that no longer runs left (its commands have
    ended with it): removed. What was done, one line (none when nothing was left)."""
    folder = run_dir / FOLDER
    left = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    shutil.rmtree(folder, ignore_errors=True)
    return [f"removed {len(left)} tenant report(s)"] if left else []


class Reports:
    """The reports of the commands that run now (keyed by path)."""

    def __init__(self, run_dir: Path, run_as: RunAs | None) -> None:
        self.folder = run_dir / FOLDER
        self._user = run_as.user if run_as is not None else None
        self._open: dict[Path, _Pipe] = {}
        remove_left(run_dir)  # an earlier run's: none of its commands runs now
        self.folder.mkdir(mode=0o700)
        if self._user is not None:
            os.chown(self.folder, -1, self._user.gid)
        os.chmod(self.folder, 0o710 if self._user is not None else 0o700)

    def path(self, name: str) -> Path:
        """Where the report `name` of a command will be (it exists while the command runs)."""
        return self.folder / name

    def open(self, paths: list[Path | None], identity: Identity | None, keep: Path | None = None,
             tally: tuple[Path | None, bytes] = (None, b"")) -> None:
        """As the command starts: its reports, writable by its group (its uid's
        own with an identity); `keep`: the report whose bytes are kept;
        `tally`: a report and the byte (one) whose occurrences it counts apart."""
        gid = identity.gid if identity is not None else self._user.gid if self._user is not None else None
        for path in paths:
            if path is None or path in self._open:
                continue
            try:
                pipe = _Pipe(path, _make_pipe(path, gid), keep=path == keep,
                             tally=tally[1] if path == tally[0] else b"")
            except OSError as exc:  # the command runs; it cannot report
                log.warning("cannot make the tenant report %s: %s", path.name, exc.strerror or exc)
                continue
            self._open[path] = pipe
            pipe.watch()

    def close(self, path: Path | None) -> Report:
        """As the command finishes: all it reported, and the pipe is gone."""
        pipe = self._open.pop(path, None) if path is not None else None
        return pipe.close() if pipe is not None else Report()

    def close_all(self) -> None:
        for path in list(self._open):
            self.close(path)


def _make_pipe(path: Path, gid: int | None) -> int:
    path.unlink(missing_ok=True)
    os.mkfifo(path, 0o600)
    # Read and write: the runtime is its reader from now on (a tenant's open never
    # waits) and never sees an end of file while tenants come and go.
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not the pipe just made")
        if gid is not None:
            os.fchown(fd, -1, gid)
            os.fchmod(fd, 0o620)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd
