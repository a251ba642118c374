"""The trace file: header, events, summaries, clear errors for broken lines, and a\nruntime that keeps serving while its trace's disk is full."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import REPO

from krex_runtime.testing.local_runtime import Runtime, command, wait_until
from krex_runtime.wire.trace.jsonl import FORMAT, FORMAT_VERSION, GAP, read_trace, replay


def test_header_and_events(runtime: Runtime) -> None:
    runtime.krex("run", "--", "true")
    runtime.stop()
    trace = read_trace(runtime.trace_path)
    assert trace.header["format"] == FORMAT and trace.header["version"] == FORMAT_VERSION
    assert len(trace.header["gpus"]) == 2 and trace.header["config_digest"]
    kinds = [e["type"] for e in trace.events]
    assert kinds[0] == "runtime_started" and kinds[-1] == "runtime_stopped"
    assert {"command_queued", "command_started", "command_finished"} <= set(kinds)
    seqs = [e["seq"] for e in trace.events]
    assert seqs == list(range(1, len(seqs) + 1))


def test_trace_summary_cli(runtime: Runtime) -> None:
    for code in (0, 1, 0):
        runtime.krex("run", "--", "sh", "-c", f"exit {code}")
    runtime.stop()
    done = subprocess.run([*command("krex"), "trace", "--json", str(runtime.trace_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    # `finished` is exit status 0; the one that exited 1 failed.
    assert summary["totals"]["finished"] == 2 and summary["totals"]["failed"] == 1
    assert summary["totals"]["submitted"] == 3 and summary["run_s"]["n"] == 3
    text = subprocess.run([*command("krex"), "trace", str(runtime.trace_path)], capture_output=True, text=True)
    assert "policy ungated" in text.stdout
    # A version 4 trace said `finished` for it: the reducer reads it as failed all the same.
    lines = [json.loads(line) for line in runtime.trace_path.read_text().splitlines()]
    lines[0]["version"] = 4
    for e in lines:
        if e.get("type") == "command_finished":
            e["state"] = "finished"
    old = runtime.trace_path.parent / "old.jsonl"
    old.write_text("".join(json.dumps(e) + "\n" for e in lines))
    state = replay(read_trace(old))
    assert sorted((c.state, c.exit_code) for c in state.commands.values()) == [("failed", 1), ("finished", 0), ("finished", 0)]
    assert state.totals["failed"] == 1 and state.totals["finished"] == 2


@pytest.mark.parametrize(
    "tail, message",
    [
        ("\n{oops\n", "line does not parse as JSON"),
        ('\n{"seq": 2, "t"', "the last line is incomplete (its write was cut short: a crash or a full disk); "
                             "the 2 line(s) before it are intact"),
    ],
    ids=["broken", "torn"],
)
def test_broken_line_is_reported_with_its_number(tmp_path: Path, tail: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "gpus": []})
    path.write_text(header + "\n" + json.dumps({"seq": 1, "t": 0, "type": "runtime_stopping"}) + tail)
    done = subprocess.run([*command("krex"), "trace", str(path)], capture_output=True, text=True)
    assert done.returncode == 125
    assert done.stderr.startswith(f"krex: {path}:3: {message}")


def test_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"hello": 1}\n')
    done = subprocess.run([*command("krex"), "trace", str(path)], capture_output=True, text=True)
    assert done.returncode == 125 and f"{path}:1: not a KREX trace" in done.stderr
    missing = subprocess.run([*command("krex"), "trace", str(tmp_path / "none")], capture_output=True, text=True)
    assert missing.returncode == 125 and "cannot open trace" in missing.stderr


def test_a_version_1_trace_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"format": FORMAT, "version": 1, "gpus": []}) + "\n")
    assert read_trace(path).header["version"] == 1


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs, to be filled."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=True)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (65536, 4096, 1):
            try:
                while True:
                    f.write(b"x" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def _lost(rt: Runtime) -> int:
    with rt.client() as c:
        return c.call("status")["trace_events_lost"]


def test_trace_survives_a_full_disk(make_runtime, small_disk: Path) -> None:
    rt = make_runtime(policy="krex", sim=1, slots=4, trace_file=small_disk / "trace.jsonl")
    assert rt.krex("run", "--", "true").returncode == 0
    filler = _fill(small_disk)
    # The trace's last page may still hold a few events: the disk is full for it
    # once the runtime counts a lost one (telemetry samples come twice a second).
    wait_until(lambda: _lost(rt) > 0, 30, "the trace to lose an event")
    echo = rt.krex("run", "--", "echo", "while full")
    assert echo.returncode == 0 and echo.stdout == "while full\n", echo.stderr
    tenant = rt.krex("run", "--", sys.executable, str(REPO / "tests" / "tenants" / "regions.py"), "--regions", "2")
    assert tenant.returncode == 0, tenant.stderr
    assert [json.loads(line).get("times_ms") is not None for line in tenant.stdout.splitlines()] == [True, True]
    with rt.client() as c:
        snapshot = c.call("snapshot")
    assert snapshot["state"]["totals"]["finished"] == 3 and snapshot["state"]["gpus"][0]["regions_granted"] == 2
    # What was written before the disk filled is whole and replays.
    assert rt.trace_path.read_bytes().endswith(b"\n")
    before = read_trace(rt.trace_path)
    assert replay(before).totals["finished"] >= 1
    # Space returns: writing resumes behind a record of what was lost.
    lost = _lost(rt)
    filler.unlink()
    wait_until(lambda: f'"type":"{GAP}"' in rt.trace_path.read_text(), 30, "the trace to write again")
    assert rt.krex("run", "--", "echo", "after").returncode == 0
    assert rt.stop() == 0
    trace = read_trace(rt.trace_path)
    assert trace.events[: len(before.events)] == before.events
    gaps = [e for e in trace.events if e["type"] == GAP]
    assert gaps and sum(g["lost"] for g in gaps) >= lost >= 8  # at least two commands' queued, started, finished
    missing = [seq for g in gaps for seq in range(g["first_seq"], g["last_seq"] + 1)]
    assert len(missing) == sum(g["lost"] for g in gaps)
    written = [e["seq"] for e in trace.events if e["type"] != GAP]
    assert sorted(written + missing) == list(range(1, max(written + missing) + 1))
    after = replay(trace)
    assert after.totals["trace_events_lost"] == len(missing) and trace.events[-1]["type"] == "runtime_stopped"
    assert any(e["type"] == "command_finished" and e["exit_code"] == 0 for e in trace.events[len(before.events) :])
    log = rt.log_path.read_text()
    # One error per outage (the few bytes left in the file's last block may let
    # a small record through, which ends one outage and begins the next).
    assert log.count("cannot write (No space left on device)") == len(gaps)
    assert f"writing again; {gaps[-1]['lost']} event(s) were lost" in log
