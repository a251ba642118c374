"""The cluster console on a cluster trace: the Nodes view at 80x24 and 120x40
with long node names and labels, a node that went down and why, drilling
into one node's own views (fed by that node's trace through the same
reducer) and back, no actions in replay, the merged history's step, many
nodes, and a gateway's status row as the view shows it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "console"))

from console_helpers import check_snapshot, rendered, run_async, settled_screen, shown_actions, wait_for
from test_trace_cluster import shifted_copy

from krex_console.cluster.console import ClusterConsole
from krex_console.cluster.nodes import NodesTable
from krex_console.cluster.nodes_feed import ClusterReplayFeed
from krex_console.dialogs import ConfirmDialog
from krex_console.main import build_parser, make_app
from krex_console.views.gpu_detail import GpuDetailScreen
from krex_console.views.overview import OverviewTable
from krex_console.views.table_sync import select_key
from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.trace.cluster import read_cluster_trace
from krex_runtime.wire.trace.jsonl import replay

SNAPSHOTS = Path(__file__).parent / "snapshots"
LONG = "gpu-node-with-a-rather-long-name-0042"
LONG_HOST = "rack17-h200-sxm-gpu-node-with-a-long-hostname.cluster.example.internal"
# Seconds into the cluster trace (node-03's start, 5 s before the others'):
# on node-01's GPU 1 the operator's lease is held.
AT = 5.9


def cluster_dir(root: Path) -> Path:
    """Three nodes from the committed node trace: one as recorded, one with a
    long name on a host with a long name, and one whose runtime died early
    (its trace ends 5 s before the others' start, without runtime_stopped)."""
    shifted_copy(root / "node-01.jsonl", 0.0, 1001)
    shifted_copy(root / f"{LONG}.jsonl", 0.05, 1002, host=LONG_HOST)
    shifted_copy(root / "node-03" / "trace.jsonl", -5.0, 1003, drop_last=2)
    return root


def cluster_app(root: Path, at: float | None = AT) -> ClusterConsole:
    args = ["--replay", str(cluster_dir(root)), "--paused"] + (["--at", str(at)] if at is not None else [])
    app = make_app(build_parser().parse_args(args))
    assert isinstance(app, ClusterConsole)
    return app


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@run_async
async def test_nodes_view_fits_both_sizes(tmp_path: Path, size: tuple[int, int]) -> None:
    app = cluster_app(tmp_path)
    tag = f"{size[0]}x{size[1]}"
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: len(app.model.nodes) == 3, what="the nodes")
        await rendered(pilot)
        table = app.query_one(NodesTable)
        shown = {c.key for c, _ in table.fitted}
        must = {"node", "state", "holders", "region_queue", "queued", "running", "inflation", "reason"}
        assert must <= shown, must - shown
        assert "reason" in shown
        if size[0] >= 120:
            assert {"gpus", "labels", "admission"} <= shown
        text = await settled_screen(pilot)
        assert "down" in text and "trace ends" in text and "1:operator" in text, text
        assert "gpu-node-…ame-0042" in text
        footer = text.splitlines()[-1]
        assert "? Help" in footer and "q Quit" in footer, footer
        check_snapshot(SNAPSHOTS, f"nodes-{tag}", text)


@run_async
async def test_drill_into_a_node_and_back(tmp_path: Path) -> None:
    app = cluster_app(tmp_path)
    cluster = read_cluster_trace(tmp_path)
    feed = app.replay
    assert isinstance(feed, ClusterReplayFeed)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.model.nodes) == 3, what="the nodes")
        await rendered(pilot)
        await pilot.press("1")  # no node open yet: nothing to show
        assert app.model.node is None
        await pilot.press("enter")  # the first row: the long-named node (rows are by name)
        await wait_for(pilot, lambda: app.model.node == LONG and app.model.state.seq > 0, what="the node's state")
        expected = replay(cluster.nodes[LONG], until=feed.clock)
        assert node_state.to_snapshot(app.model.state) == node_state.to_snapshot(expected)
        await rendered(pilot)
        assert app.query_one("#tabs").active == "overview"
        assert f"node [b]{LONG}[/b]" in app.status_text()
        await pilot.press("enter")  # its GPU 0's detail, as on one node
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), what="the GPU detail")
        await pilot.press("escape")
        await pilot.press("3")
        await rendered(pilot)
        text = await settled_screen(pilot)
        # The merge's tag is not an event's field: only runtime_started names its node.
        assert "command_queued" in text and text.count("node=") == 1 and "runtime_started" in text
        await pilot.press("escape")  # back to all nodes
        await rendered(pilot)
        assert app.model.node is None and app.query_one("#tabs").active == "nodes"
        assert feed.focus is None
        await pilot.press("down", "enter")  # another node: its own state, not the last one's
        await wait_for(pilot, lambda: app.model.node == "node-01" and app.model.state.seq > 0)
        await rendered(pilot)
        overview = app.query_one(OverviewTable)
        assert overview.selected_gpu() is not None
        assert node_state.to_snapshot(app.model.state) == node_state.to_snapshot(
            replay(cluster.nodes["node-01"], until=feed.clock))
        # No actions in replay, on a node's GPU either (GPU 1: leased by the operator in the trace).
        await pilot.press("down")
        assert not shown_actions(app) & {"lease", "release", "recycle", "toggle_admission"}
        for key in ("l", "u", "c", "p"):
            await pilot.press(key)
            assert not isinstance(app.screen, ConfirmDialog)
        assert not app.actions_allowed


@run_async
async def test_a_dead_node_and_the_merged_step(tmp_path: Path) -> None:
    app = cluster_app(tmp_path, at=None)
    cluster = read_cluster_trace(tmp_path)
    feed = app.replay
    assert isinstance(feed, ClusterReplayFeed)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.model.nodes) == 3)
        # `n` applies the merged history's next event: node-03's come first (its clock is 5 s earlier).
        await pilot.press("n", "n", "n")
        assert feed.index == 3
        assert [f.index for f in feed.feeds.values()] == [0, 0, 3]
        for _ in range(len(cluster.events) - 3):
            feed.step()
        assert [f.index for f in feed.feeds.values()] == [len(t.events) for t in cluster.nodes.values()]
        by_name = {n.name: n for n in feed.nodes()}
        assert not by_name["node-03"].alive and by_name["node-03"].reason == "trace ends"
        assert not by_name["node-01"].alive and by_name["node-01"].reason == "stopped"
        feed.seek(cluster.events[0]["t"] - 1)
        assert all(reason == "not started yet" for _, reason, _ in map(feed.node_state, feed.feeds))
        feed.seek_offset(AT)
        alive = {n.name: n.alive for n in feed.nodes()}
        assert alive == {"node-01": True, LONG: True, "node-03": False}


@run_async
async def test_many_nodes(tmp_path: Path) -> None:
    """64 nodes: the Nodes view holds a row each, sorted by name; the last
    one opens and closes like the first (each view's update costs the rows
    it shows; tests/console's 100k-event test covers the node views)."""
    for i in range(64):
        shifted_copy(tmp_path / f"node-{i:03d}.jsonl", i * 0.01, 2000 + i)
    app = make_app(build_parser().parse_args(["--replay", str(tmp_path), "--paused", "--at", "0.9"]))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(app.model.nodes) == 64, what="64 nodes")
        await rendered(pilot)
        table = app.query_one(NodesTable)
        assert [r.key.value for r in table.ordered_rows] == [f"node-{i:03d}" for i in range(64)]
        assert select_key(table, "node-063")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.model.node == "node-063" and app.model.state.seq > 0, what="node-063")
        await rendered(pilot)
        await pilot.press("escape")
        await rendered(pilot)
        assert app.model.node is None and table.row_count == 64


def test_a_gateway_row_becomes_a_node_summary() -> None:
    """A row of the gateway's status (CLUSTER-CONTRACT.md): the node's own
    status body gives holders, queues, slots (its canary takes none) and the
    canary's inflation; a dead node's row has no status and reads n/a."""
    from krex_console.cluster import node_summary as cm
    from krex_console.cluster.nodes import node_row

    status = {
        "policy": "krex", "queued": 3, "paused": False,
        "commands": [{"id": "c1", "label": "canary", "timeout_s": None}, {"id": "x", "label": "", "timeout_s": 60}],
        "gpus": [
            {"index": 0, "name": "NVIDIA H200", "slots": 4, "running": ["c1", "x"], "queued": 2, "region_holder": 7,
             "region_kind": "region", "region_queue": 1, "canary": {"inside_p50": 0.01, "inside_p95": 0.034}},
            {"index": 1, "name": "NVIDIA H200", "slots": 4, "running": [], "queued": 0, "region_holder": 0,
             "region_kind": "lease", "region_queue": 0, "paused": True, "canary": {"inside_p50": None}},
        ],
    }
    up = cm.from_status_row({"name": LONG, "alive": True, "since": 100.0, "reason": "", "gpus": 2,
                             "labels": {"zone": "a", "rack": "r17"}, "status": status})
    assert cm.holders_text(up) == "0:t7 1:operator" and up.running == 1 and up.slots == 8 and up.queued == 3
    assert up.gpus is not None and up.gpus[0].canary and cm.worst_inflation(up) == 0.034
    assert cm.admission_text(up) == "1 paused" and cm.labels_text(up) == "rack=r17 zone=a"
    row = node_row(up, now=160.0)
    assert row.cells["node"].plain == "gpu-node-…ame-0042" and row.cells["since"] == "1m00s"
    assert row.cells["inflation"] == "+3.4%" and row.cells["running"] == "1/8" and row.cells["region_queue"] == "1"
    down = cm.from_status_row({"name": "n2", "alive": False, "since": 150.0, "reason": "raylet gone", "gpus": 2,
                               "labels": {}, "status": None})
    row = node_row(down, now=160.0)
    assert row.cells["state"].plain == "down" and row.cells["reason"].plain == "raylet gone"
    assert row.cells["running"] == "n/a" and row.cells["holders"].plain == "n/a" and down.gpu_count == 2


def test_the_cluster_command_line() -> None:
    app = make_app(build_parser().parse_args(["--cluster", "ipc:///nowhere/control.sock"]))
    assert isinstance(app, ClusterConsole) and app.cluster is not None and app.live is None
    with pytest.raises(SystemExit, match="--cluster names the gateway: leave out --connect and --run-dir"):
        make_app(build_parser().parse_args(["--cluster", "ipc:///a", "--connect", "ipc:///b"]))


@run_async
async def test_a_render_tick_after_exit_draws_nothing(tmp_path: Path) -> None:
    """The render timer's last tick can land after exit has taken every screen
    down; it must neither raise nor touch a screen."""
    app = cluster_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled_screen(pilot)
    assert not app.screen_stack
    app._dirty = True
    renders = app.renders
    app._render_tick()
    assert app.renders == renders
