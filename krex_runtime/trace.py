"""The append-only JSONL trace: a header line, then one event per line.

docs/trace-format.md is the specification. Reading reports a line that does
not parse with its line number instead of guessing past it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from krex_runtime import state as node_state

FORMAT = "krex-trace"
FORMAT_VERSION = 1


class TraceError(Exception):
    """A trace that cannot be read; the message names the file and line."""


class TraceWriter:
    """Appends events; each line is written whole and flushed, so a killed
    runtime leaves a trace that ends on a complete line."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("w", encoding="utf-8")
        self.write({"format": FORMAT, "version": FORMAT_VERSION, **header})

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


@dataclass
class Trace:
    header: dict[str, Any]
    events: list[dict[str, Any]]


def iter_trace(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) pairs; the first record is the header (the first
    line that is not blank).

    Every event is checked as it is read: its fields (state.check_event), its
    `seq` (one more than the last), and that the reducer folds it; so whatever
    this yields replays, and whatever does not names its line."""
    try:
        f = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open trace: {exc.strerror}") from None
    state = node_state.NodeState()
    header_seen = False
    with f:
        # Bytes, decoded line by line: a text reader decodes ahead in chunks and
        # would blame a bad byte on an earlier line.
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise TraceError(f"{path}:{lineno}: line is not UTF-8") from None
            if not line.strip():
                continue
            record = _parse_line(path, lineno, line)
            if not header_seen:
                _check_header(path, lineno, record)
                header_seen = True
            else:
                try:
                    node_state.check_event(record)
                    if record["seq"] != state.seq + 1:
                        raise node_state.EventError(
                            f"event seq {record['seq']} follows seq {state.seq} (events missing or out of order)"
                        )
                    node_state.apply(state, record)
                except node_state.EventError as exc:
                    raise TraceError(f"{path}:{lineno}: {exc}") from None
            yield lineno, record
    if not header_seen:
        raise TraceError(f"{path}: trace is empty (no header line)")


def _parse_line(path: Path, lineno: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{lineno}: line does not parse as JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # a number with too many digits, nesting too deep
        raise TraceError(f"{path}:{lineno}: line does not parse as JSON ({exc})") from None
    if not isinstance(record, dict):
        raise TraceError(f"{path}:{lineno}: a trace line must be a JSON object")
    return record


# Header fields a reader uses, and their types (the rest is for people).
_HEADER_FIELDS: dict[str, tuple[type, ...]] = {
    "node?": (str,), "policy?": (str,), "started_at?": (int, float), "gpus?": (list,),
}


def _check_header(path: Path, lineno: int, record: dict[str, Any]) -> None:
    if record.get("format") != FORMAT:
        raise TraceError(f"{path}:{lineno}: not a KREX trace (header has no \"format\": \"{FORMAT}\")")
    if record.get("version") != FORMAT_VERSION:
        version = record.get("version")
        raise TraceError(f"{path}:{lineno}: trace format version {version!r} is not supported (expected {FORMAT_VERSION})")
    try:
        node_state.check_fields("header", record, _HEADER_FIELDS)
    except node_state.EventError as exc:
        raise TraceError(f"{path}:{lineno}: {exc}") from None


def read_trace(path: Path) -> Trace:
    records = iter_trace(path)
    _, header = next(records)
    return Trace(header, [record for _, record in records])


def replay(trace: Trace, until: float | None = None) -> node_state.NodeState:
    """The node state at trace time `until` (the end when None)."""
    state = node_state.NodeState()
    for event in trace.events:
        if until is not None and event.get("t", 0.0) > until:
            break
        node_state.apply(state, event)
    return state


def summarize(trace: Trace) -> dict[str, Any]:
    """Figures `krex trace FILE` prints: counts, durations, per-GPU concurrency."""
    state = node_state.NodeState()
    started: dict[str, float] = {}
    queue_waits: list[float] = []
    run_times: list[float] = []
    running: dict[int, int] = {}
    peak: dict[int, int] = {}
    by_type: dict[str, int] = {}
    for event in trace.events:
        by_type[event["type"]] = by_type.get(event["type"], 0) + 1
        kind, t = event["type"], event.get("t", 0.0)
        if kind == "command_started":
            cmd = state.commands.get(event["id"])
            if cmd is not None:
                queue_waits.append(t - cmd.submitted_at)
            started[event["id"]] = t
            gpu = event["gpu"]
            running[gpu] = running.get(gpu, 0) + 1
            peak[gpu] = max(peak.get(gpu, 0), running[gpu])
        elif kind == "command_finished" and event["id"] in started:
            run_times.append(t - started.pop(event["id"]))
            cmd = state.commands.get(event["id"])
            if cmd is not None and cmd.gpu is not None:
                running[cmd.gpu] -= 1
        node_state.apply(state, event)
    first = trace.events[0].get("t", 0.0) if trace.events else 0.0
    last = trace.events[-1].get("t", 0.0) if trace.events else 0.0
    return {
        "node": trace.header.get("node", "?"),
        "policy": trace.header.get("policy", "?"),
        "gpus": len(trace.header.get("gpus", [])),
        "events": len(trace.events),
        "span_s": last - first,
        "events_by_type": by_type,
        "totals": dict(state.totals),
        "queue_wait_s": _quantiles(queue_waits),
        "run_s": _quantiles(run_times),
        "peak_running_per_gpu": {str(k): v for k, v in sorted(peak.items())},
        "unfinished": len(started),
    }


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {"n": len(ordered), "p50": q(0.50), "p95": q(0.95), "max": ordered[-1]}
