"""The cluster console against a real gateway (`krex-cluster head` on a Ray
cluster of this machine, each node's agent running its own runtime on a
simulated GPU): the Nodes view from the gateway's status and `cluster`
topic, drilling into a node through the gateway's relay, operator actions
on a node's GPU (the same dialogs, the body naming the node), a node that
dies and comes back, and a tenant refused."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "console"))

try:  # the local cluster helper: krex_cluster.testing, where the cluster layer keeps it
    from krex_cluster import testing as cluster_helpers
except ImportError:  # (its earlier place, beside the cluster's tests)
    import cluster_helpers  # type: ignore[no-redef]
from console_helpers import rendered, run_async, screen_text, shown_actions, wait_for

from krex_console.cluster.console import ClusterConsole
from krex_console.cluster.nodes import NodesTable
from krex_console.dialogs import ConfirmDialog
from krex_console.feed import FeedStatus
from krex_console.views.table_sync import select_key
from krex_runtime.testing.local_runtime import Runtime

pytestmark = pytest.mark.cluster

NODE = "gpu-node-rack17-a"


class KrexPolicyRuntime(Runtime):
    """The cluster's runtimes under policy krex: leases and regions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"policy": "krex", **kwargs})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    patch = pytest.MonkeyPatch()
    patch.setattr(cluster_helpers, "Runtime", KrexPolicyRuntime)
    k = cluster_helpers.KrexCluster(tmp_path_factory.mktemp("cc"), labels={NODE: {"rack": "r17", "zone": "a"},
                                                                          "n2": {"zone": "b"}}, sim=1, slots=2)
    try:
        k.start()
        yield k
    finally:
        k.shutdown()
        patch.undo()


async def choose(pilot: Any, app: ClusterConsole, name: str) -> None:
    await rendered(pilot)
    assert select_key(app.query_one(NodesTable), name) or app.query_one(NodesTable).cursor_row == 0
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.model.node == name and app.model.state.gpus, what=f"node {name}'s state")
    await rendered(pilot)


async def confirmed(pilot: Any, app: ClusterConsole, key: str) -> str:
    """Press an action's key, confirm its dialog, and return the question it asked."""
    app.last_outcome = None
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="the confirm dialog")
    question = app.screen.action_plan.question
    await pilot.press("tab", "enter")  # Cancel has the focus: confirming takes Tab
    await wait_for(pilot, lambda: app.last_outcome is not None, timeout_s=60, what="the action's reply")
    return question


@run_async
async def test_nodes_drill_in_and_act_on_a_node(cluster: Any) -> None:
    app = ClusterConsole(control=cluster.endpoint)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.model.nodes) == 2 and all(n.gpus for n in app.model.nodes),
                       what="both nodes with their status")
        await rendered(pilot)
        text = screen_text(app)
        assert "● LIVE" in text and "nodes 2/2 alive" in text and "rack=r17 zone=a" in text and "zone=b" in text
        assert app.cluster is not None and app.cluster.telemetry == cluster.telemetry  # from the gateway's hello
        # Each node's status body carries its canary's inflation estimate (null here: no canary runs).
        assert set(cluster.rows()["n2"]["status"]["gpus"][0]["canary"]) == {"inside_p50", "inside_p95", "samples", "flagged"}

        # A command placed by label on n2 shows on its row, then in its own views.
        client = cluster.client()
        held = client.submit(["sleep", "3"], label="held", node_labels={"zone": "b"})
        await wait_for(pilot, lambda: next(n for n in app.model.nodes if n.name == "n2").running == 1,
                       what="n2's row to show the command")
        await choose(pilot, app, "n2")
        assert app.live is not None and app.live.node == "n2" and app.live.topic_prefix == b"node/n2/"
        await wait_for(pilot, lambda: any(c.label == "held" for c in app.model.state.commands.values()),
                       what="the command in n2's state")
        assert app.model.state.node == "n2" and app.status == FeedStatus.LIVE
        # The node's views show n2's own id; the gateway's status maps it to the cluster's, so
        # Kill is offered and the output pane follows it by the id the gateway knows.
        local = next(c for c in app.model.state.commands.values() if c.label == "held")
        await wait_for(pilot, lambda: app.cluster_id(local.id) == held.id, what="the gateway's id of n2's command")
        assert app.allows("kill", local)

        # Actions on n2's GPU 0: the same dialogs, naming the node; the keys follow the GPU's state.
        assert {"lease", "toggle_admission"} <= shown_actions(app) and "release" not in shown_actions(app)
        question = await confirmed(pilot, app, "p")
        assert question.startswith("Pause admission on GPU 0 (") and question.endswith(" on node n2?")
        assert app.last_outcome is not None and app.last_outcome.ok, app.last_outcome.message
        await wait_for(pilot, lambda: app.model.state.gpus[0].paused, what="GPU 0 paused")
        assert (await confirmed(pilot, app, "p")).startswith("Resume admission on GPU 0")
        await wait_for(pilot, lambda: not app.model.state.gpus[0].paused, what="GPU 0 admitting again")

        assert (await confirmed(pilot, app, "l")).endswith(" on node n2?")
        assert app.last_outcome.ok, app.last_outcome.message
        await wait_for(pilot, lambda: app.model.state.gpus[0].region_holder == 0, what="the operator's lease")
        await rendered(pilot)
        assert "release" in shown_actions(app) and "lease" not in shown_actions(app)
        await pilot.press("escape")  # all nodes: the lease shows on n2's row
        await wait_for(pilot, lambda: "0:operator" in screen_text(app), what="n2's row to show the lease")
        assert app.live is None and app.model.node is None
        await choose(pilot, app, "n2")
        await confirmed(pilot, app, "u")
        assert app.last_outcome.ok, app.last_outcome.message
        await wait_for(pilot, lambda: app.model.state.gpus[0].region_holder is None, what="the lease released")
    with client:
        assert held.wait(60).state == "finished"


@run_async
async def test_a_dead_node_shows_why_and_comes_back(cluster: Any) -> None:
    app = ClusterConsole(control=cluster.endpoint)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(app.model.nodes) == 2 and all(n.alive for n in app.model.nodes))
        await choose(pilot, app, "n2")
        cluster.remove_node("n2")  # its raylet gone
        await wait_for(pilot, lambda: "NODE DOWN: raylet gone" in app.status_text(), timeout_s=60,
                       what="the open node's header to say it is down")
        await pilot.press("escape")
        await rendered(pilot)
        text = screen_text(app)
        row = next(line for line in text.splitlines() if " n2 " in line)
        assert " down " in row and "raylet gone" in row and "n/a" in row, row
        cluster.add_node("n2")
        await wait_for(pilot, lambda: next(n for n in app.model.nodes if n.name == "n2").gpus, timeout_s=120,
                       what="n2 back with its status")
        await rendered(pilot)
        row = next(line for line in screen_text(app).splitlines() if " n2 " in line)
        assert " up " in row and "raylet" not in row, row


TENANT = """
import asyncio
import sys
from krex_console import actions
from krex_runtime.wire.protocol import verbs
plan = actions.on_node(actions.plan(verbs.PAUSE, "Pause admission on", "GPU 0", {"gpu": 0}), sys.argv[2])
print(asyncio.run(actions.perform(sys.argv[1], plan)).message)
"""


def test_a_tenant_is_refused(cluster: Any, tmp_path: Path) -> None:
    """A command's own process asks the gateway to pause a GPU, as the console
    would: the gateway says forbidden, and the console's notification says so."""
    script = tmp_path / "tenant.py"
    script.write_text(TENANT)
    with cluster.client() as c:
        result = c.run([sys.executable, str(script), cluster.endpoint, "n2"], label="tenant")
    assert result.stdout.startswith("Pause admission on GPU 0 on node n2 failed: forbidden: "), result.stdout + result.stderr


@run_async
async def test_a_node_runtime_is_not_a_gateway(cluster: Any) -> None:
    runtime = f"ipc://{cluster.runtimes['n2'].run_dir / 'control.sock'}"
    app = ClusterConsole(control=runtime)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.cluster_status == FeedStatus.DISCONNECTED, what="the refusal")
        assert "is a node's runtime, not a cluster gateway: use --connect" in app.cluster_detail
        assert json.dumps(app.cluster_detail).count("\\n") == 0
