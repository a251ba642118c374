"""A trace's segment files: the live file and the numbered segments moved
aside before it (docs/trace-format.md, "Segments").

`trace.jsonl` is the live file; `trace.jsonl.1`, `.2`... are the segments a
restart or a rotation moved aside, numbered in the order they were written.
Every reader of a trace gets its files from `segments`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def move_aside(path: Path) -> Path:
    """Rename the live file to the next numbered segment; a torn last line
    (a crash in mid-write) is cut off first, so every segment ends whole."""
    with path.open("rb+") as f:
        data_end = f.seek(0, os.SEEK_END)
        tail = 0
        while tail < data_end:
            step = min(4096, data_end - tail)
            f.seek(data_end - tail - step)
            chunk = f.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                tail += step - newline - 1
                break
            tail += step
        if tail:
            f.truncate(data_end - tail)
    numbers = [n for n, _ in _numbered(path)]
    target = path.with_name(f"{path.name}.{max(numbers, default=0) + 1}")
    os.rename(path, target)
    return target


def _numbered(path: Path) -> list[tuple[int, Path]]:
    """The numbered segments of the live file `path`, oldest first."""
    pattern = re.compile(re.escape(path.name) + r"\.([0-9]{1,9})")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    found = [(int(m[1]), path.parent / name) for name in names if (m := pattern.fullmatch(name))]
    return sorted(found)


def segments(path: Path) -> list[Path]:
    """The files of the history `path` names, oldest first: for a live trace
    its numbered segments, then itself; for a numbered segment (`trace.jsonl.3`)
    the history up to and including it."""
    match = re.fullmatch(r"(.+)\.([0-9]{1,9})", path.name)
    if match and path.exists() and not path.with_name(path.name + ".1").exists():
        base, upto = path.with_name(match[1]), int(match[2])
        return [p for n, p in _numbered(base) if n <= upto]
    numbered = [p for _, p in _numbered(path)]
    return [*numbered, path] if path.exists() or not numbered else numbered
