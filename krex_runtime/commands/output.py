"""A command's output on its way to its files and to whoever is attached,
whatever the disk does.

The pipe is always drained: a write to the output file that fails (a full
disk, a quota, a file system gone read-only) never stops the reading, so the
command never blocks on a full pipe and its time limit, cancel and the
runtime's shutdown work as on a healthy disk. Attached clients get every
byte first; the file keeps what could be written, a clean prefix (after the
first failed write nothing more is written to it, so it has no holes), and
`OutputLoss` counts the rest per stream for the command's result.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

READ_CHUNK = 64 * 1024
# How long a run's end waits for its output readers to reach the end of its pipes.
READER_DRAIN_TIMEOUT_S = 5.0

OutputSink = Callable[[str, bytes], None]


@dataclass
class OutputLoss:
    """Bytes of a command's output its files did not get, and why (the first error)."""

    stdout: int = 0
    stderr: int = 0
    error: str = ""

    def add(self, stream: str, lost: int, why: str) -> None:
        setattr(self, stream, getattr(self, stream) + lost)
        self.error = self.error or why

    @property
    def total(self) -> int:
        return self.stdout + self.stderr

    def record(self) -> dict[str, int]:
        return {"stdout": self.stdout, "stderr": self.stderr}


class OutputFile:
    """One stream's file, written unbuffered so that what it holds is known."""

    def __init__(self, path: Path, stream: str, loss: OutputLoss) -> None:
        self.path, self.stream, self.loss = path, stream, loss
        self._fd: int | None = None
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            self._failed(exc)

    def write(self, chunk: bytes) -> None:
        if self._fd is None:
            self.loss.add(self.stream, len(chunk), "")
            return
        view = memoryview(chunk)
        while view:
            try:
                view = view[os.write(self._fd, view):]
            except OSError as exc:
                self.loss.add(self.stream, len(view), "")
                self._failed(exc)
                return

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _failed(self, exc: OSError) -> None:
        """Stop writing (the file stays a prefix of the stream), saying why once."""
        self.close()
        self.loss.error = self.loss.error or f"{self.path}: {exc.strerror or exc}"


async def pump_output(stream: asyncio.StreamReader, name: str, path: Path, sink: OutputSink, loss: OutputLoss) -> None:
    """Copy one output stream to its file and to whoever is attached, until EOF.
    Every mode's commands use it, so their output reaches clients the same way."""
    out = OutputFile(path, name, loss)
    try:
        while chunk := await stream.read(READ_CHUNK):
            sink(name, chunk)  # clients first: a failing disk must not hold back what they see
            out.write(chunk)
    finally:
        out.close()


async def pipe_reader(fd: int) -> asyncio.StreamReader:
    """An asyncio reader over the read end of a pipe (which it takes over)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_CHUNK * 4)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    return reader
