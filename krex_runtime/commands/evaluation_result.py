"""An ended command's evaluation: the result line the evaluation harness
printed last on its stdout, read back from the command's output file.

Every ended command is looked at (no submit option): a command whose last
stdout line is a `KREX-EVAL-RESULT` line of schema 1 gets `evaluation` in
its result record and `command_finished` event; any other gets none. What a
tenant printed is read with care: only the last TAIL_BYTES of the file, a
last line that does not begin inside them (longer than that) is no result,
nor is one from a file that lost output (a full disk: the file is then a
prefix of the stream, its last line not the stream's), and a line that does
not parse is skipped, never raised.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from krex_runtime.wire.eval_line import MARKER
from krex_runtime.wire.evaluation import parse_line
from krex_runtime.wire.evaluation_record import compact

log = logging.getLogger("krex.dispatcher")

TAIL_BYTES = 64 * 1024


def evaluation_of(stdout_path: Path | None, lost_stdout: int = 0) -> dict[str, Any] | None:
    """The compact evaluation the command's output ends with (None: none)."""
    if stdout_path is None or lost_stdout:
        return None
    line = last_line(stdout_path)
    if line is None or not line.startswith(MARKER):
        return None
    try:
        report = parse_line(line)
        return compact(report.to_dict()) if report is not None else None
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        log.info("%s: its last line is not a result of schema 1: %s", stdout_path.name, str(exc)[:200])
        return None


def last_line(path: Path) -> str | None:
    """The file's last non-empty line, if it begins within its last TAIL_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - TAIL_BYTES)
        tail = os.pread(fd, TAIL_BYTES, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    tail = tail.rstrip(b"\r\n")
    cut = tail.rfind(b"\n")
    if cut < 0 and start > 0:
        return None  # the line began before the window: longer than TAIL_BYTES
    return tail[cut + 1:].decode("utf-8", errors="replace")
