"""The append-only JSONL trace: a header line, then one event per line, in
one or more segment files that read as one history.

The live file is the path the runtime was given (`trace.jsonl`); a runtime
that starts where a trace exists, and a live file that reaches the rotation
size, move it aside to the next numbered segment (`trace.jsonl.1`, `.2`...,
in the order written), so a restart never truncates history. Every reader
goes through `segments` and `iter_trace`, which read the numbered segments,
then the live file, as one trace.

docs/trace-format.md is the specification. Reading reports a line that does
not parse with its file and line number instead of guessing past it (and
says so when it is a torn last line).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.state import events
from krex_runtime.wire.state.event_check import EventError, check_event, check_fields
from krex_runtime.wire.state.model import NodeState
from krex_runtime.wire.trace.segments import move_aside, segments

FORMAT = "krex-trace"
FORMAT_VERSION = 5
# Version 2 added the `trace_gap` record, version 3 the zygote events and
# segments (a header's `part`); a version 1 or 2 trace is a valid version 3
# one of one segment. Version 4 added regions over a set of GPUs (`gpus` on
# the region events and command_started, `gpus` and `gpu_count` on
# command_queued), fields a reader of version 3 may skip; a version 3 trace
# is a valid version 4 one with every command and region on one GPU. Version 5
# says `failed` in command_finished for a command that exited with a status
# other than 0 or was ended by a signal (earlier: `finished`; the reducer
# reads an earlier trace's such command as `failed` too:
# command_states.ended_state), and adds the verdict `perturbed`, the hold's
# findings (region_released's verdict_reasons and exit_flags) and
# region_granted's host_side_s and host_side_left; a version 4 trace is
# otherwise a valid version 5 one.
READABLE_VERSIONS = (1, 2, 3, 4, 5)
GAP = events.TraceGap.type

log = logging.getLogger("krex.trace")


class TraceError(Exception):
    """A trace that cannot be read; the message names the file and line."""


# What a trace path may be instead of a regular file, as the refusal names it.
_NOT_A_FILE = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
               stat.S_IFDIR: "a folder", stat.S_IFSOCK: "a socket"}


def not_a_trace_file(mode: int) -> str | None:
    """What a file of this st_mode is when it cannot be a trace (None: a
    regular file). A FIFO would block the writer's open until someone reads
    it, a device takes what is written (or does something on open)."""
    return None if stat.S_ISREG(mode) else _NOT_A_FILE.get(stat.S_IFMT(mode), "not a regular file")


def check_trace_path(path: Path) -> None:
    """OSError, with a reason to show, unless `path` is a regular file or
    does not exist yet (a symbolic link counts as what it points to)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    kind = not_a_trace_file(mode)
    if kind is not None:
        raise OSError(errno.EINVAL, f"it is {kind}, not a regular file")


class TraceWriter:
    """Appends events, one whole line per write to an O_APPEND descriptor.

    Losing the trace must never stop the node: when a write fails (a full
    disk, EIO, any OSError) the writer logs one error, cuts off the part of
    the line that reached the file (so the trace still ends on a complete
    line), counts the events it could not write, and tries again with each
    later event. The first write that succeeds after a failure is preceded by
    a `trace_gap` record saying how many events (which seq numbers) are
    missing. Lines written before the failure are never touched.
    """

    def __init__(self, path: Path, header: dict[str, Any], rotate_bytes: int = 0) -> None:
        """Raises OSError when the trace cannot be created; an earlier trace at
        `path` becomes the next numbered segment first, never truncated."""
        path.parent.mkdir(parents=True, exist_ok=True)
        check_trace_path(path)
        self.path = path
        self.rotate_bytes = rotate_bytes  # 0: never rotate
        if path.exists() and path.stat().st_size > 0:
            move_aside(path)
        self._fd = self._open_live()
        self._size = 0  # bytes of complete lines in the file
        self._torn = False  # a partly written line could not be cut off yet
        self._failing = False
        self._part = 0  # segments of this run written before the live one
        self._run_header = {"format": FORMAT, "version": FORMAT_VERSION, **header}
        self._header: dict[str, Any] | None = self._run_header | {"part": 0}
        self._next_rotation = rotate_bytes
        self.lost = 0  # events not written since the last successful write
        self.lost_total = 0
        self._first_lost: dict[str, Any] = {}
        self._last_lost: dict[str, Any] = {}
        self._write_owed()

    def _open_live(self) -> int:
        """The live file, opened without ever blocking: a FIFO put at the path
        meanwhile fails (ENXIO without a reader) or is refused once open."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK,
                     0o644)
        kind = not_a_trace_file(os.fstat(fd).st_mode)
        if kind is not None:
            os.close(fd)
            raise OSError(errno.EINVAL, f"it is {kind}, not a regular file")
        return fd

    def write(self, record: dict[str, Any]) -> None:
        # Each event tries again (a failing write costs one syscall), so nothing
        # is dropped once space returns, the runtime's last events included.
        if self._write_owed() and self._append(record):
            if self.rotate_bytes and self._size >= self._next_rotation:
                self._rotate()
            return
        if not self.lost:
            self._first_lost = record
        self._last_lost = record
        self.lost += 1
        self.lost_total += 1

    def _write_owed(self) -> bool:
        """Cut a torn line, write the header and the gap record where still owed;
        False while the file cannot take them."""
        if self._torn:
            self._cut_torn_line()
            if self._torn:
                return False
        if self._header is not None:
            if not self._append(self._header):
                return False
            self._header = None
        if self.lost:
            lost = events.TraceGap(
                lost=self.lost,
                first_seq=self._first_lost.get("seq"),
                last_seq=self._last_lost.get("seq"),
                since=self._first_lost.get("t"),
            )
            # No seq (the gap is not an event the runtime numbered): its `t` follows its `type`.
            gap = {"type": GAP, "t": time.time()} | events.to_wire(lost)
            if not self._append(gap):
                return False
            log.warning("trace %s: writing again; %d event(s) were lost (seq %s to %s)",
                        self.path, self.lost, gap["first_seq"], gap["last_seq"])
            self.lost = 0
        return True

    def _append(self, record: dict[str, Any]) -> bool:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        view = memoryview(line)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            if len(view) < len(line):
                self._torn = True
                self._cut_torn_line()
            if not self._failing:
                self._failing = True
                log.error("trace %s: cannot write (%s); the runtime keeps serving, counts the events it cannot "
                          "record and writes again when it can", self.path, exc.strerror or exc)
            return False
        self._size += len(line)
        self._failing = False
        return True

    def _rotate(self) -> None:
        """Move the live file aside as the next segment and go on in a fresh
        one whose header continues this run. Where that fails the events go on
        into the current file (nothing is lost) and rotation is tried again one
        rotation size later."""
        try:
            os.fsync(self._fd)
            move_aside(self.path)
        except OSError as exc:
            self._next_rotation = self._size + self.rotate_bytes
            log.error("trace %s: cannot rotate (%s); writing on in this segment", self.path, exc.strerror or exc)
            return
        try:
            fd = self._open_live()
        except OSError as exc:
            # The segment moved aside is still open and takes the events.
            self._next_rotation = self._size + self.rotate_bytes
            log.error("trace %s: cannot start a new segment (%s); writing on in %s", self.path,
                      exc.strerror or exc, segments(self.path)[-1])
            return
        os.close(self._fd)
        self._fd, self._size, self._next_rotation = fd, 0, self.rotate_bytes
        self._part += 1
        self._header = self._run_header | {"part": self._part}
        self._write_owed()

    def _cut_torn_line(self) -> None:
        """Remove the part of a line a failed write left (truncating needs no
        space). Until that works nothing more is appended; a reader meeting a
        torn last line says so."""
        try:
            os.ftruncate(self._fd, self._size)
            self._torn = False
        except OSError:
            pass

    def close(self) -> None:
        if self._fd < 0:
            return
        self._write_owed()
        try:
            os.fsync(self._fd)
        except OSError as exc:
            log.error("trace %s: cannot flush to disk (%s)", self.path, exc.strerror)
        if self.lost:
            log.error("trace %s: the last %d event(s) were never written", self.path, self.lost)
        os.close(self._fd)
        self._fd = -1


@dataclass
class Trace:
    header: dict[str, Any]  # the first segment's
    events: list[dict[str, Any]]
    headers: list[dict[str, Any]] = field(default_factory=list)  # every segment's, in order


def iter_trace(path: Path, headers: list[dict[str, Any]] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) pairs over the segments of `path` read as one;
    the first record is the first segment's header. Every segment's header is
    checked, and appended to `headers` when given.

    Every event is checked as it is read: its fields (event_check.check_event), its
    `seq` (one more than the last; a segment that starts a run starts again at
    1), and that the reducer folds it; so whatever this yields replays, and
    whatever does not names its file and line."""
    state = NodeState()
    for index, segment in enumerate(segments(path)):
        header_seen = False
        for lineno, record in _records(segment):
            if header_seen:
                _check_event(segment, lineno, record, state)
                yield lineno, record
                continue
            _check_header(segment, lineno, record)
            header_seen = True
            if headers is not None:
                headers.append(record)
            if not record.get("part"):
                state = NodeState()  # a run of its own: numbering starts again
            if index == 0:
                yield lineno, record
        if not header_seen:
            raise TraceError(f"{segment}: trace is empty (no header line)")


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        f = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open trace: {exc.strerror}") from None
    with f:
        # Bytes, decoded line by line: a text reader decodes ahead in chunks and
        # would blame a bad byte on an earlier line.
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise TraceError(f"{path}:{lineno}: line is not UTF-8") from None
            if line.strip():
                yield lineno, _parse_line(path, lineno, line)


def _check_event(path: Path, lineno: int, record: dict[str, Any], state: NodeState) -> None:
    try:
        check_event(record)
        if record["type"] != GAP and record["seq"] != state.seq + 1:
            raise EventError(f"event seq {record['seq']} follows seq {state.seq} (events missing or out of order)")
        node_state.apply(state, record)
    except EventError as exc:
        raise TraceError(f"{path}:{lineno}: {exc}") from None


def _parse_line(path: Path, lineno: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        if not line.endswith("\n"):
            raise TraceError(
                f"{path}:{lineno}: the last line is incomplete (its write was cut short: a crash or a "
                f"full disk); the {lineno - 1} line(s) before it are intact"
            ) from None
        raise TraceError(f"{path}:{lineno}: line does not parse as JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # a number with too many digits, nesting too deep
        raise TraceError(f"{path}:{lineno}: line does not parse as JSON ({exc})") from None
    if not isinstance(record, dict):
        raise TraceError(f"{path}:{lineno}: a trace line must be a JSON object")
    return record


# Header fields a reader uses, and their types (the rest is for people).
_HEADER_FIELDS: dict[str, tuple[type, ...]] = {
    "node?": (str,), "policy?": (str,), "started_at?": (int, float), "gpus?": (list,), "part?": (int,),
}


def _check_header(path: Path, lineno: int, record: dict[str, Any]) -> None:
    if record.get("format") != FORMAT:
        raise TraceError(f"{path}:{lineno}: not a KREX trace (header has no \"format\": \"{FORMAT}\")")
    if record.get("version") not in READABLE_VERSIONS:
        version = record.get("version")
        raise TraceError(
            f"{path}:{lineno}: trace format version {version!r} is not supported (this reader knows {list(READABLE_VERSIONS)})"
        )
    try:
        check_fields("header", record, _HEADER_FIELDS)
    except EventError as exc:
        raise TraceError(f"{path}:{lineno}: {exc}") from None


def read_trace(path: Path) -> Trace:
    """The whole history `path` names (see `segments`), checked."""
    headers: list[dict[str, Any]] = []
    records = iter_trace(path, headers)
    _, header = next(records)
    return Trace(header, [record for _, record in records], headers)


def replay(trace: Trace, until: float | None = None) -> NodeState:
    """The node state at trace time `until` (the end when None)."""
    state = NodeState()
    for event in trace.events:
        if until is not None and event.get("t", 0.0) > until:
            break
        node_state.apply(state, event)
    return state
