"""The trace file: header, events, summaries, and clear errors for broken lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from krex_runtime.local_runtime import Runtime, command
from krex_runtime.trace import FORMAT, FORMAT_VERSION, read_trace


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
    assert summary["totals"]["finished"] == 3 and summary["totals"]["submitted"] == 3
    assert summary["run_s"]["n"] == 3
    text = subprocess.run([*command("krex"), "trace", str(runtime.trace_path)], capture_output=True, text=True)
    assert "policy ungated" in text.stdout


def test_broken_line_is_reported_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "gpus": []})
    path.write_text(header + "\n" + json.dumps({"seq": 1, "t": 0, "type": "runtime_stopping"}) + "\n{oops\n")
    done = subprocess.run([*command("krex"), "trace", str(path)], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith(f"krex: {path}:3: line does not parse as JSON")


def test_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"hello": 1}\n')
    done = subprocess.run([*command("krex"), "trace", str(path)], capture_output=True, text=True)
    assert done.returncode == 1 and f"{path}:1: not a KREX trace" in done.stderr
    missing = subprocess.run([*command("krex"), "trace", str(tmp_path / "none")], capture_output=True, text=True)
    assert missing.returncode == 1 and "cannot open trace" in missing.stderr
