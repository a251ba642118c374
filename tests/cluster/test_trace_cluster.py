"""Cluster traces: node traces from real runtimes merged into one history by
time, each event tagged with its node; `krex trace DIR` per node; and each
bad input (no traces, a torn or malformed node trace, two traces of one
node) refused with one line that says what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from krex_cluster.trace import collect
from krex_console.main import main as console_main
from krex_runtime.testing.local_runtime import command, wait_until
from krex_runtime.wire.trace.cluster import ClusterTraceError, read_cluster_trace
from krex_runtime.wire.trace.jsonl import TraceError, read_trace, replay

FIXTURE = Path(__file__).resolve().parents[1] / "console" / "data" / "small-trace.jsonl"


def shifted_copy(target: Path, dt: float, pid: int, host: str | None = None, drop_last: int = 0) -> Path:
    """The committed node trace as another node's: its clock shifted by `dt`,
    its runtime another process (`pid`), its host renamed."""
    lines = FIXTURE.read_text().splitlines()
    out = []
    for record in map(json.loads, lines[: len(lines) - drop_last]):
        for key in ("t", "started_at"):
            if key in record:
                record[key] += dt
        if record.get("type") == "runtime_started":
            record["pid"] = pid
        if host is not None and ("format" in record or record.get("type") == "runtime_started"):
            record["node"] = host
        out.append(json.dumps(record))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(out) + "\n")
    return target


def krex_trace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command("krex"), "trace", *args], capture_output=True, text=True, timeout=60)


def test_node_traces_from_real_runtimes_merge_by_time(make_runtime, tmp_path: Path) -> None:
    """Two runtimes, one of which stops and starts again (its trace gets a
    second segment): the merged history has every event once, by time, each
    node's in its own order, tagged with its node; `krex trace DIR` sums it
    up per node."""
    a = make_runtime("a", sim=1, slots=2)
    b = make_runtime("b", sim=1, slots=2)
    with a.client(timeout_s=30) as c:
        ids = [c.call("submit", {"argv": ["sh", "-c", f"exit {code}"], "label": f"a{code}"})["id"] for code in (0, 3)]
        for cid in ids:
            c.call("wait", {"id": cid, "attach": False}, timeout=30)
    with b.client(timeout_s=30) as c:
        cid = c.call("submit", {"argv": ["true"], "label": "b0"})["id"]
        c.call("wait", {"id": cid, "attach": False}, timeout=30)
        c.call("pause", {"gpu": 0})
        c.call("resume", {"gpu": 0})
    assert b.stop() == 0
    b.start()  # the node comes back: its trace moves aside as a segment, a new run begins
    wait_until(lambda: b.trace_path.with_name("trace.jsonl.1").exists(), 10, "b's first run as a segment")
    with b.client(timeout_s=30) as c:
        cid = c.call("submit", {"argv": ["true"], "label": "b1"})["id"]
        c.call("wait", {"id": cid, "attach": False}, timeout=30)
    assert a.stop() == 0 and b.stop() == 0

    directory = collect({"node-a": a.trace_path, "node-b": b.trace_path}, tmp_path / "cluster")
    assert sorted(p.name for p in directory.iterdir()) == ["node-a.jsonl", "node-b.jsonl", "node-b.jsonl.1"]
    cluster = read_cluster_trace(directory)
    assert list(cluster.nodes) == ["node-a", "node-b"]
    own = {name: read_trace(path).events for name, path in (("node-a", a.trace_path), ("node-b", b.trace_path))}
    assert len(cluster.events) == sum(map(len, own.values()))
    times = [e["t"] for e in cluster.events]
    assert times == sorted(times)
    for name, events in own.items():
        mine = [e for e in cluster.events if e["node"] == name]
        assert [(e["seq"], e["type"]) for e in mine] == [(e["seq"], e["type"]) for e in events]
    assert [e["type"] for e in cluster.events if e["node"] == "node-b"].count("runtime_started") == 2
    # Each node's history still folds through the one reducer.
    assert replay(cluster.nodes["node-b"]).totals["finished"] == 2
    assert replay(cluster.nodes["node-a"]).totals == {"submitted": 2, "finished": 1, "failed": 1}  # one exited 3

    done = krex_trace("--json", str(directory))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["cluster"] and list(summary["nodes"]) == ["node-a", "node-b"]
    assert summary["nodes"]["node-a"]["totals"]["submitted"] == 2 and summary["nodes"]["node-b"]["totals"]["submitted"] == 2
    assert summary["totals"]["submitted"] == 4 and summary["events"] == len(cluster.events) and summary["gpus"] == 2
    assert summary["nodes"]["node-b"]["events_by_type"]["runtime_started"] == 2
    text = krex_trace(str(directory))
    assert text.returncode == 0 and "2 node(s)" in text.stdout
    assert "node-a" in text.stdout and "node-b" in text.stdout


# --- bad input: one line each, naming what is wrong ------------------------------------------


def one_line_error(directory: Path) -> str:
    """What `krex trace DIR` and `krex-console --replay DIR` say of it (the same line)."""
    with pytest.raises(TraceError) as caught:
        read_cluster_trace(directory)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_directory_without_node_traces(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a trace\n")
    message = one_line_error(tmp_path)
    assert message == (f"{tmp_path}: no node traces in it (a cluster trace holds NODE.jsonl files or "
                       "NODE/trace.jsonl folders)")
    done = krex_trace(str(tmp_path))
    assert done.returncode == 125 and done.stderr == f"krex: {message}\n"


@pytest.mark.parametrize("damage, says", [
    ("torn", "42: the last line is incomplete (its write was cut short: a crash or a full disk); "
             "the 41 line(s) before it are intact"),
    ("malformed", "3: line does not parse as JSON (Expecting property name enclosed in double quotes)"),
])
def test_a_torn_or_malformed_node_trace(tmp_path: Path, damage: str, says: str) -> None:
    shifted_copy(tmp_path / "node-a.jsonl", 0.0, 1001)
    b = shifted_copy(tmp_path / "node-b.jsonl", 0.1, 1002)
    lines = b.read_text().splitlines(keepends=True)
    if damage == "torn":
        b.write_text("".join(lines[:-1]) + lines[-1][:-9])  # the last write cut short
    else:
        b.write_text("".join(lines[:2]) + "{not json\n" + "".join(lines[2:]))
    assert one_line_error(tmp_path) == f"{b}:{says}"
    # The console refuses it the same way, with one line, before it draws anything.
    assert console_main(["--replay", str(tmp_path)]) == 1


def test_two_traces_of_one_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shifted_copy(tmp_path / "node-a.jsonl", 0.0, 1001)
    shifted_copy(tmp_path / "node-a" / "trace.jsonl", 0.5, 1002)  # the same name in the other layout
    message = one_line_error(tmp_path)
    assert message == f"{tmp_path}: two traces claim node 'node-a': node-a/trace.jsonl and node-a.jsonl (keep one)"
    with pytest.raises(ClusterTraceError):
        read_cluster_trace(tmp_path)

    other = tmp_path / "copied"
    shifted_copy(other / "node-a.jsonl", 0.0, 1001)
    shifted_copy(other / "node-z.jsonl", 0.0, 1001)  # one runtime's run under two names: it would count twice
    message = one_line_error(other)
    assert message == (f"{other}: two traces claim the same node: node-a.jsonl and node-z.jsonl are one runtime's run "
                       "(host node-01, pid 1001); keep one")
    assert console_main(["--replay", str(other)]) == 1
    assert capsys.readouterr().err == f"krex-console: {message}\n"


def test_collect_refuses_names_that_are_not_file_names(tmp_path: Path) -> None:
    trace = shifted_copy(tmp_path / "src" / "trace.jsonl", 0.0, 1001)
    for bad in ("../up", "", ".hidden"):
        with pytest.raises(ClusterTraceError, match="cannot name a file"):
            collect({bad: trace}, tmp_path / "out")
    collect({"n1": trace}, tmp_path / "out")
    with pytest.raises(ClusterTraceError, match="already holds a trace of node 'n1'"):
        collect({"n1": trace}, tmp_path / "out")



def test_the_cluster_trace_needs_no_ray() -> None:
    """Reading, summarising and replaying a cluster trace (and the console's
    cluster views) import no Ray: they run where the cluster layer is not installed."""
    code = ("import sys, krex_cluster.trace, krex_runtime.cli, krex_console.main, krex_console.cluster.console; "
            "sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
