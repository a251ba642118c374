"""The trace is never truncated: a restart moves the old trace aside as a
segment, a live file past `runtime.trace_rotate_bytes` rotates, and every
reader (read_trace, `krex trace`, the console's replay, which reads through
read_trace) reads the segments as one history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from krex_runtime.wire.trace.jsonl import TraceWriter, read_trace, replay, segments


def _types(path: Path) -> list[str]:
    return [e["type"] for e in read_trace(path).events]


def test_a_restarted_runtime_keeps_the_old_trace(make_runtime: Any) -> None:
    rt = make_runtime(sim=1)
    assert rt.krex("run", "--", "echo", "first run").returncode == 0
    assert rt.stop() == 0
    first = read_trace(rt.trace_path)
    rt.start()
    assert rt.krex("run", "--", "echo", "second run").returncode == 0
    assert rt.stop() == 0
    assert segments(rt.trace_path) == [rt.trace_path.with_name("trace.jsonl.1"), rt.trace_path]
    both = read_trace(rt.trace_path)
    assert both.events[: len(first.events)] == first.events  # the first run, whole
    assert [h["part"] for h in both.headers] == [0, 0]  # two runs, one segment each
    assert _types(rt.trace_path).count("runtime_started") == 2
    assert sum(1 for e in both.events if e["type"] == "command_finished") == 2
    summary = json.loads(rt.krex("trace", "--json", str(rt.trace_path)).stdout)
    assert summary["events"] == len(both.events) and summary["totals"]["finished"] >= 1


def test_rotation_makes_segments_that_read_back_as_one_history(make_runtime: Any) -> None:
    rt = make_runtime(sim=1, runtime_extra="trace_rotate_bytes = 4096")
    for i in range(40):  # until the trace has rotated at least twice
        assert rt.krex("run", "--label", "y" * 200, "--", "echo", str(i)).returncode == 0
        if len(segments(rt.trace_path)) >= 3:
            break
    assert rt.stop() == 0
    files = segments(rt.trace_path)
    assert len(files) >= 3, files
    assert all(f.stat().st_size < 4096 + 8192 for f in files)  # each rotated about the rotation size
    trace = read_trace(rt.trace_path)
    assert [e["seq"] for e in trace.events] == list(range(1, len(trace.events) + 1))  # one run, no gap
    assert [h["part"] for h in trace.headers] == list(range(len(files)))
    assert trace.events[0]["type"] == "runtime_started" and trace.events[-1]["type"] == "runtime_stopped"
    done = rt.krex("trace", "--json", str(rt.trace_path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["events"] == len(trace.events)
    # The console's replay (which reads through read_trace) plays the whole history.
    from krex_console.feed import ReplayFeed

    feed = ReplayFeed(trace)
    feed.seek(feed.end)
    assert feed.index == len(trace.events) and feed.state.totals == replay(trace).totals
    # A numbered segment names the history up to it.
    assert len(read_trace(files[1]).headers) == 2


def test_a_torn_last_line_left_by_a_crash_is_cut_before_the_trace_moves_aside(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, {"node": "n"})
    writer.close()
    with path.open("ab") as f:
        f.write(b'{"seq": 1, "t": 1.0, "type": "runtime_st')  # a crash in mid-write
    TraceWriter(path, {"node": "n"}).close()
    moved = tmp_path / "trace.jsonl.1"
    assert moved.read_bytes().endswith(b"}\n") and len(read_trace(moved).headers) == 1
    assert len(read_trace(path).headers) == 2
