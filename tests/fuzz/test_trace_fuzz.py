"""Fuzzing the trace reader and the reducer behind replay with mutations of a
real recorded trace: either it reads and replays (the CLI summary and the
console's replay feed and figures included), or a TraceError names the file
and the line, never another exception."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz_helpers import JUNK, TEXT, budget, mutated
from hypothesis import event, example, given
from hypothesis import strategies as st

from krex_console.feed import EventLog, ReplayFeed
from krex_console.model import gpu_figures
from krex_console.views.events import detail, subject
from krex_runtime.testing.local_runtime import command
from krex_runtime.wire.state import events, reducer
from krex_runtime.wire.state.event_check import SHAPES
from krex_runtime.wire.trace.jsonl import FORMAT, FORMAT_VERSION, TraceError, read_trace, replay
from krex_runtime.wire.trace.summary import summarize

HERE = Path(__file__).resolve().parent
# Two real recorded traces: the console's fixture, and one with every kind of event.
LINES = (HERE.parent / "console" / "data" / "small-trace.jsonl").read_bytes().splitlines(keepends=True)
RICH = (HERE / "data" / "rich-trace.jsonl").read_bytes().splitlines(keepends=True)
RECORDED = st.sampled_from([LINES, RICH])
VIEWED_KEYS = sorted({k.rstrip("?") for fields in SHAPES.values() for k in fields} | {"seq", "t"})
BAD_BYTES = st.binary(min_size=1, max_size=8) | st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])
EVENT_TYPES = sorted(events.EVENTS)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trace-fuzz") / "trace.jsonl"


def read_or_refuse(path: Path, lines: list[bytes]) -> int | None:
    """Write `lines`, read them back, replay them every way the tools do.
    Returns the line number a TraceError names, None when the trace replayed."""
    path.write_bytes(b"".join(lines))
    try:
        trace = read_trace(path)
    except TraceError as exc:
        message = str(exc)
        found = re.match(rf"{re.escape(str(path))}:(\d+): \S", message)
        if found is None:
            assert message == f"{path}: trace is empty (no header line)", message
            assert not b"".join(lines).strip(), message
            return 0
        lineno = int(found.group(1))
        content = b"".join(lines)
        assert 1 <= lineno <= content.count(b"\n") + (not content.endswith(b"\n")), message
        return lineno
    replay(trace)
    summarize(trace)
    feed = ReplayFeed(trace, checkpoint_every=7)
    feed.seek(feed.end)
    feed.seek(feed.start)
    while feed.index < len(feed.events):
        feed.step()
    for gpu in feed.state.gpus.values():
        gpu_figures(feed.state, gpu, feed.clock)
    log = EventLog()
    for item in trace.events:
        log.add(item)
        subject(item), detail(item)
    return None


def test_the_recorded_traces_replay(trace_file: Path) -> None:
    assert read_or_refuse(trace_file, LINES) is None
    assert read_or_refuse(trace_file, RICH) is None
    kinds = {json.loads(line).get("type") for line in RICH[1:]}
    # trace_gap is the writer's, for a disk that filled: tests/wire/test_trace.py records one;
    # zygote_failed needs a preload unsafe to fork from: tests/commands/test_forked.py records one.
    skipped = {"region_withdrawn", "trace_gap", "zygote_failed"}
    assert kinds >= set(EVENT_TYPES) - skipped, "record_rich_trace.py no longer records every event"


@st.composite
def byte_mutations(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """A recorded trace with some bytes flipped, cut or inserted in one line; and that line's index."""
    lines = list(draw(RECORDED))
    i = draw(st.integers(0, len(lines) - 1))
    lines[i] = draw(mutated(lines[i], BAD_BYTES))
    if draw(st.booleans()):
        del lines[i + 1 :]  # a trace cut short, as by a full disk
    return lines, i


@st.composite
def line_mutations(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """Whole lines dropped, repeated or swapped; the index of the first one changed."""
    lines = list(draw(RECORDED))
    i = draw(st.integers(0, len(lines) - 1))
    j = draw(st.integers(0, len(lines) - 1))
    op = draw(st.sampled_from(["drop", "repeat", "swap", "blank"]))
    if op == "drop":
        del lines[i]
    elif op == "repeat":
        lines.insert(j, lines[i])
    elif op == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines.insert(i, b"   \n")
    return lines, min(i, j)


def _junk_for(value: Any) -> st.SearchStrategy[Any]:
    return JUNK | st.sampled_from([None, -1, 2**63, 1.5, "", [], {}, [None], {"0": None}, True])


@st.composite
def field_mutations(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """One record (header or event) with a field changed to junk, dropped or added."""
    lines = list(draw(RECORDED))
    i = draw(st.integers(0, len(lines) - 1))
    record = json.loads(lines[i])
    op = draw(st.sampled_from(["set", "drop", "add", "type", "nested"]))
    key = draw(st.sampled_from(sorted(record)))
    if op == "set":
        record[key] = draw(_junk_for(record[key]))
    elif op == "drop":
        del record[key]
    elif op == "add":  # any key, or one the reducer or the views read on some event
        record[draw(TEXT | st.sampled_from(VIEWED_KEYS))] = draw(JUNK)
    elif op == "type":
        record["type"] = draw(st.sampled_from(EVENT_TYPES) | TEXT)
    else:
        inner = record[key]
        if isinstance(inner, list) and inner and isinstance(inner[0], dict):
            inner = inner[0]
        if isinstance(inner, dict) and inner:
            inner[draw(st.sampled_from(sorted(inner)))] = draw(JUNK)
    text = json.dumps(record)  # NaN and Infinity as Python writes them
    lines[i] = text.encode() + b"\n"
    return lines, i


@st.composite
def header_mutations(draw: st.DrawFn) -> tuple[list[bytes], int]:
    lines = list(draw(RECORDED))
    header = json.loads(lines[0])
    header["format"] = draw(st.just(FORMAT) | TEXT)
    header["version"] = draw(st.sampled_from([FORMAT_VERSION, FORMAT_VERSION + 1, 0, "1", None, 1.0]))
    lines = list(draw(RECORDED))
    lines[0] = json.dumps(header).encode() + b"\n"
    return lines, 0


@budget(300)
@given(byte_mutations() | line_mutations() | field_mutations() | header_mutations())
@example(([LINES[0], b"[" * 10_000 + b"\n"], 1)).via("nesting too deep for the parser")
@example(([LINES[0], b"1" * 5000 + b"\n"], 1)).via("an integer with too many digits")
@example(([b"\n", *LINES[1:]], 1)).via("a blank line where the header belongs")
@example(([LINES[0], *LINES[2:]], 1)).via("runtime_started missing: GPUs never announced")
@example(([LINES[0], LINES[1][:-1] + b"\xff\n", *LINES[2:]], 1)).via("invalid UTF-8 late in a chunk")
@example(([*LINES[:2], b'{"seq":2,"t":1.0,"type":"telemetry","gpus":{"x":{}}}\n'], 2)).via("a GPU key not an index")
@example(([*LINES[:2], b'{"seq":2,"t":1.0,"type":"canary_baseline","gpu":0,"compute_ms":0,"memory_ms":0}\n',
           b'{"seq":3,"t":1.0,"type":"canary_sample","gpu":0,"compute_ms":1,"memory_ms":1}\n'], 2)).via("a zero baseline")
@example(([*LINES[:2], b'{"seq":2,"t":1.0,"type":"canary_baseline","gpu":0,"compute_ms":1,"memory_ms":1}\n',
           b'{"seq":3,"t":1.0,"type":"canary_sample","gpu":0,"compute_ms":0,"memory_ms":0}\n',
           b'{"seq":4,"t":1.0,"type":"canary_sample","gpu":0,"compute_ms":1,"memory_ms":1,"where":"outside"}\n'], 2))
@example(([*LINES[:2], b'{"seq":2,"t":NaN,"type":"runtime_stopping"}\n'], 2)).via("a clock that is not a number")
@example(([*LINES[:2], b'{"seq":2,"t":1.0,"type":"region_withdrawn","gpu":0,"region":"x"}\n'], 2))
@example(([*LINES[:2], b'{"seq":2,"t":1.0,"type":"runtime_stopping","argv":5}\n'], 2)).via("argv on another event")
@example(([LINES[0], LINES[1][:9] + b"\n" + LINES[1][9:], *LINES[2:]], 1)).via("a line split in two")
def test_mutated_traces_replay_or_name_their_line(trace_file: Path, mutation: tuple[list[bytes], int]) -> None:
    lines, changed = mutation  # the index of the first chunk changed
    lineno = read_or_refuse(trace_file, lines)
    event("refused" if lineno is not None else "replayed")
    if lineno and changed < len(lines):
        first_changed_line = 1 + b"".join(lines[:changed]).count(b"\n")
        assert lineno >= first_changed_line, f"line {lineno} blamed; the first change is on line {first_changed_line}"


# --- the tools show the error with its line and exit non-zero -------------------


def _malformed(tmp_path: Path) -> tuple[Path, str]:
    """A real trace whose fourth line starts a command that was never queued."""
    lines = [LINES[0], LINES[1], LINES[2], json.dumps({"seq": 3, "t": 1.0, "type": "command_started", "id": "nope",
                                                       "gpu": 0, "pid": 1, "tenant_id": 1}).encode() + b"\n"]
    path = tmp_path / "malformed.jsonl"
    path.write_bytes(b"".join(lines))
    return path, f"{path}:4: command_started: command 'nope' was never queued"


def test_krex_trace_names_the_line(tmp_path: Path) -> None:
    path, message = _malformed(tmp_path)
    done = subprocess.run([*command("krex"), "trace", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 125
    assert done.stderr.startswith(f"krex: {message}"), done.stderr
    assert "Traceback" not in done.stderr


def test_console_replay_names_the_line(tmp_path: Path) -> None:
    path, message = _malformed(tmp_path)
    done = subprocess.run([sys.executable, "-m", "krex_console.main", "--replay", str(path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert done.stderr.startswith(f"krex-console: {message}"), done.stderr
    assert "Traceback" not in done.stderr


def test_every_event_has_a_reducer_and_every_reducer_an_event() -> None:
    assert set(reducer.REDUCERS) == set(events.EVENTS.values())
    assert set(SHAPES) == set(events.EVENTS)
