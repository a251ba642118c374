"""The commands the gateway holds (no node could take them yet), kept in a
file of its run dir so that a gateway restarted after a crash holds them
again under the same ids: a `wait` or `cancel` on the new gateway finds them.

What the nodes run is not in it: the agents keep that, and a restarted
gateway adopts it from them. The file is small and rewritten whole, and
atomically (a temporary file, fsync, rename, fsync of the folder), whenever
the held set changes; the rewrites of one burst of changes are one write.
It is 0600: bodies carry their commands' environment.

A file that cannot be read or is not what this writes is moved aside
(`held.json.bad`), never deleted, and the gateway starts holding nothing
from it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from krex_runtime.wire.protocol.bodies import SubmitBody
from krex_runtime.wire.typed import ShapeError, from_dict

log = logging.getLogger("krex.cluster")

FILE_NAME = "held.json"
FORMAT = "krex-cluster held commands"
VERSION = 1
# The held commands as entries of the file (commands.CommandTable.held_entries).
Snapshot = Callable[[], list[dict[str, Any]]]


class HeldFileError(Exception):
    """A held-commands file that cannot be used; one line for the log."""


def write(path: Path, entries: list[dict[str, Any]]) -> None:
    """Replace the file with `entries`, atomically: a reader (or a gateway
    started after a crash) finds the old file or the new one, never a part."""
    data = json.dumps({"format": FORMAT, "version": VERSION, "written_at": time.time(), "commands": entries},
                      separators=(",", ":")).encode()
    tmp = path.with_name(f".{path.name}.tmp")  # one gateway per run dir (gateway.lock): one writer
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # one left by a crash may have had another mode
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def read(path: Path) -> list[dict[str, Any]]:
    """The entries of the file ([] when there is none); HeldFileError when it
    cannot be read or is not a held-commands file of this version."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise HeldFileError(f"cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeldFileError(f"is not JSON (torn or overwritten?): {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise HeldFileError(f"is not a held-commands file (no \"format\": {FORMAT!r})")
    if data.get("version") != VERSION:
        raise HeldFileError(f"has version {data.get('version')!r}, this gateway reads {VERSION}")
    commands = data.get("commands")
    if not isinstance(commands, list):
        raise HeldFileError("is malformed: commands: expected a list")
    seen: set[str] = set()
    for i, entry in enumerate(commands):
        why = _unfit(entry)
        if not why and entry["id"] in seen:
            why = f"id {entry['id']!r} twice"
        if why:
            raise HeldFileError(f"is malformed: commands[{i}]: {why}")
        seen.add(entry["id"])
    return commands


def _unfit(entry: Any) -> str:
    """Why one entry is not a held command ("" when it is one)."""
    if not isinstance(entry, dict):
        return "expected a table"
    unknown = set(entry) - {"id", "body", "retries_left", "attempts", "submitted_at"}
    if unknown:
        return f"unknown key {sorted(unknown)[0]!r}"
    if not isinstance(entry.get("id"), str) or not entry["id"]:
        return "id: expected a non-empty string"
    for key in ("retries_left", "attempts"):
        value = entry.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1000:
            return f"{key}: expected a count, got {value!r}"
    at = entry.get("submitted_at")
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
        return f"submitted_at: expected a time, got {at!r}"
    try:
        from_dict(SubmitBody, entry.get("body"), "body")  # what a node's runtime would be sent
    except ShapeError as exc:
        return str(exc)
    return ""


def move_aside(path: Path) -> Path:
    """Rename a bad file to NAME.bad (NAME.bad.1 ... if one is there): kept
    for a person to look at, out of the next gateway's way."""
    bad = path.with_name(path.name + ".bad")
    n = 0
    while bad.exists() or bad.is_symlink():
        n += 1
        bad = path.with_name(f"{path.name}.bad.{n}")
    os.rename(path, bad)
    return bad


def load(path: Path) -> list[dict[str, Any]]:
    """What a starting gateway holds again: the file's entries, or nothing
    (and one line in the log, the file moved aside) when it is bad."""
    try:
        return read(path)
    except HeldFileError as exc:
        try:
            where = f"moved aside to {move_aside(path)}"
        except OSError as move:
            where = f"could not be moved aside ({move.strerror or move})"
        log.error("held commands file %s %s: %s; the gateway starts holding nothing from it", path, exc, where)
        return []


class HeldFile:
    """Keeps the file in step with the gateway's held set: `changed()` after
    each change; `flushed()` waits until what was held then is on disk. One
    write at a time, in a thread (fsync is slow); changes that come during a
    write are taken by the next one."""

    def __init__(self, path: Path, snapshot: Snapshot) -> None:
        self.path = path
        self.snapshot = snapshot
        self._wanted = 0  # changes asked for
        self._written = 0  # changes on disk (or whose write failed, and said so)
        self._progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def changed(self) -> None:
        self._wanted += 1
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._write_until_current())

    async def flushed(self) -> None:
        target = self._wanted
        while self._written < target:
            progress = self._progress
            await progress.wait()

    async def _write_until_current(self) -> None:
        while self._written < self._wanted:
            target, entries = self._wanted, self.snapshot()
            try:
                await asyncio.to_thread(write, self.path, entries)
                if self._failing:
                    log.info("held commands file %s written again", self.path)
                self._failing = False
            except OSError as exc:  # the commands stay held here; the next change tries again
                if not self._failing:
                    log.error("held commands file %s cannot be written: %s; a gateway restarted now would not "
                              "hold its %d held commands", self.path, exc.strerror or exc, len(entries))
                self._failing = True
            self._written = target
            self._progress.set()
            self._progress = asyncio.Event()
