"""A KREX cluster on one machine: 3 Ray nodes (ray.cluster_utils), each with
its own runtime on simulated GPUs started by its node agent, and the gateway
as a process. One cluster for the whole module; the tests run in order
(the failure tests leave the cluster whole again)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="the cluster tests need the `cluster` extra (ray)")

from krex_cluster.testing import KrexCluster, results_by_label, wait_for  # noqa: E402
from krex_runtime.api import Client, RequestFailed, RuntimeUnavailable  # noqa: E402
from krex_runtime.api.results import Command  # noqa: E402
from krex_runtime.regions.certificate import RANK  # noqa: E402
from krex_runtime.sim.device_file import remove_device  # noqa: E402
from krex_runtime.testing import hygiene  # noqa: E402

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[KrexCluster]:
    before = hygiene.baseline()
    kc = KrexCluster(tmp_path_factory.mktemp("cluster"))
    problems: list[str] = []
    try:
        kc.start()
        with kc.client() as c:  # each node has run a command before its descriptors are noted
            for name in kc.runtimes:
                assert c.run(["true"], node_labels={"host": name}).ok
        for name in kc.runtimes:
            kc.note_fds(name)
        yield kc
    finally:
        problems += kc.shutdown()
        for rt in kc.runtimes.values():
            remove_device(rt.device)
    # After everything stopped: nothing of any node's runtime is left (Ray's
    # own processes, started during the run too, are Ray's to end).
    for name, rt in kc.runtimes.items():
        found = [p for p in hygiene.leftovers(rt.run_dir, rt.lock_dir, before) if "started during the run" not in p]
        problems += [f"{name}: {p}" for p in found]
    assert not problems, "\n".join(problems)


def test_hello_and_status_speak_for_the_cluster(cluster: KrexCluster) -> None:
    with cluster.client() as c:
        hello = c.call("hello")
        status = c.status()
    assert hello["cluster"] is True and hello["telemetry"] == cluster.telemetry
    assert len(hello["gpus"]) == 6 and {g["node"] for g in hello["gpus"]} == {"n1", "n2", "n3"}
    rows = {r["name"]: r for r in status.record["cluster"]["nodes"]}
    assert set(rows) == {"n1", "n2", "n3"}
    for name, row in rows.items():
        assert row["alive"] and row["reason"] == "" and row["gpus"] == 2
        assert row["labels"] == cluster.labels[name]
        assert row["status"]["labels"] == cluster.labels[name] and len(row["status"]["gpus"]) == 2
    assert len(status.gpus) == 6


def test_malformed_and_unsupported_requests_get_the_protocol_errors(cluster: KrexCluster) -> None:
    conn = Client(cluster.endpoint, timeout=10)
    try:
        for frame, code in (
            (b"not json", "bad_message"),
            (b'{"v": 2, "type": "hello", "id": "x1", "body": {}}', "unsupported_version"),
            (b'{"v": 1, "type": "teleport", "id": "x2", "body": {}}', "unknown_type"),
            (b'{"v": 1, "type": "submit", "id": "x3", "body": {"argv": "ls"}}', "bad_request"),
            (b'{"v": 1, "type": "pause", "id": "x4", "body": {}}', "bad_request"),  # no node named
            (b'{"v": 1, "type": "pause", "id": "x5", "body": {"node": "n9"}}', "not_found"),
            (b'{"v": 1, "type": "snapshot", "id": "x6", "body": {}}', "bad_request"),
        ):
            conn.send_raw(frame)
            reply = conn.receive(10)
            assert reply is not None and reply["ok"] is False, frame
            assert reply["error"]["code"] == code, (frame, reply)
        assert conn.call("hello")["cluster"]  # still serving
    finally:
        conn.close()


def test_a_command_whose_needs_no_node_meets_is_refused_clearly(cluster: KrexCluster) -> None:
    with cluster.client() as c:
        with pytest.raises(RequestFailed) as err:
            c.submit(["true"], node_labels={"zone": "z"})
        assert err.value.code == "refused"
        assert "no node meets the command's needs" in err.value.reason and "n1: lacks zone=z" in err.value.reason
        with pytest.raises(RequestFailed, match="no GPU named like 'H200'"):
            c.submit(["true"], gpu_model="H200")
        with pytest.raises(RequestFailed, match="no context pool"):
            c.submit(["python3", "-c", "pass"], mode="pooled")
        # What a node meets goes there, and its output and result come back.
        result = c.run(["sh", "-c", "echo out; echo err >&2; exit 3"], node_labels={"zone": "b"}, gpu_model="simulated")
        measured = c.run([sys.executable, "-c", "from krex_runtime.client import region\nwith region():\n    pass"],
                         node_labels={"zone": "b"})
    assert (result.exit_code, result.stdout, result.stderr, result.record["node"]) == (3, "out\n", "err\n", "n3")
    assert measured.ok, measured.stderr
    assert len(measured.regions) == 1 and measured.regions[0].verdict in RANK  # a verdict, whichever this machine earns


def test_a_thousand_commands_from_several_submitters_each_result_once(cluster: KrexCluster) -> None:
    submitters, each = 4, 250
    results: dict[int, list[Any]] = {}
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        try:
            with cluster.client() as c:
                commands = [Command(["true"], label=f"s{i}-{j}", node_labels={"zone": "b"} if j % 5 == 0 else None)
                            for j in range(each)]
                results[i] = list(c.map(commands, max_in_flight=8))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,), daemon=True) for i in range(submitters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), f"submitters still waiting: {cluster.rows()}\n{cluster.gateway_log()}"
    every = [r for rs in results.values() for r in rs]
    by_label = results_by_label(every)
    assert len(every) == submitters * each and len({r.id for r in every}) == len(every)
    assert set(by_label) == {f"s{i}-{j}" for i in range(submitters) for j in range(each)}
    assert all(r.ok for r in every), [r for r in every if not r.ok][:3]
    on: dict[str, int] = {}
    for r in every:
        on[r.record["node"]] = on.get(r.record["node"], 0) + 1
    assert all(by_label[f"s{i}-{j}"].record["node"] == "n3" for i in range(submitters) for j in range(0, each, 5))
    assert set(on) == {"n1", "n2", "n3"} and min(on.values()) >= 50, on  # spread by load
    with cluster.client() as c:
        status = c.call("status")
    assert status["results_dropped"] == 0 and not status["commands"]
    for rt in cluster.runtimes.values():
        assert hygiene.held_back(rt.run_dir) == []


def test_an_evaluation_batch_runs_through_the_gateway_across_nodes(cluster: KrexCluster) -> None:
    """`evaluate_many` through the gateway as through one runtime: each pair is
    one command placed on some node, its regions' verdicts and integrity come
    back with it, and the trusted rule reads them. The CI problem files with
    the torch stand-in (every node shares this machine's filesystem, as the
    nodes of a real cluster share the folders they evaluate)."""
    tenants = Path(__file__).resolve().parents[1] / "tenants"
    ci = tenants / "eval"
    pairs = [(ci / "relu_add.py", ci / "relu_add__torch.py"), (ci / "relu_add.py", ci / "relu_add__cached.py"),
             (ci / "relu_add.py", ci / "relu_add__incorrect.py"), (ci / "row_sum.py", ci / "row_sum__torch.py"),
             (ci / "small_matmul.py", ci / "small_matmul__torch.py"), (ci / "row_sum.py", ci / "row_sum__wrong_shape.py")]
    env = {**os.environ, "PYTHONPATH": str(tenants / "torch_on_sim")}
    with cluster.client(timeout=60) as c:
        found = list(c.evaluate_many(pairs * 2, max_in_flight=6, env=env, trials=5, timeout=180))
        node_of = {e.command_id: c.show(e.command_id).record.get("node") for e in found}
    assert len(found) == 12 and len(node_of) == 12
    assert len(set(node_of.values()) - {None}) >= 2, node_of  # spread over the nodes
    by_name: dict[str, list[Any]] = {}
    for e in found:
        by_name.setdefault(Path(e.candidate_path).name, []).append(e)
    for name in ("relu_add__torch.py", "row_sum__torch.py", "small_matmul__torch.py"):
        for e in by_name[name]:
            assert e.correct and e.failure_class is None and e.speedup is not None, (e.failure_message, e.failure_detail)
            # n3 runs policy krex: its regions are held and certified (verified, or perturbed on a
            # crowded test machine); the other nodes' runtimes are ungated, so no region of theirs has
            # a verdict and nothing from them is trusted.
            certified = node_of[e.command_id] == "n3"
            assert [r.verdict is not None for r in e.regions] == [certified, certified], (node_of[e.command_id], e.regions)
            assert not e.trusted or all(r.verdict == "verified" for r in e.regions), e.regions
            assert certified or not e.trusted
    assert all(e.failure_class == "incorrect" for e in by_name["relu_add__cached.py"] + by_name["relu_add__incorrect.py"])
    assert all(e.failure_class == "wrong_shape" for e in by_name["row_sum__wrong_shape.py"])
    assert not any(e.trusted for n in ("relu_add__cached.py", "relu_add__incorrect.py") for e in by_name[n])


def test_operators_steer_a_node_and_tenants_are_refused(cluster: KrexCluster) -> None:
    done = cluster.krex("pause", "--node", "n2")
    assert done.returncode == 0 and "paused admission on the node" in done.stdout, done.stderr
    assert cluster.rows()["n2"]["status"]["paused"] or wait_for(lambda: cluster.rows()["n2"]["status"]["paused"], 10, "n2 paused")
    with cluster.client() as c:
        placed = {c.run(["true"]).record["node"] for _ in range(4)}
    assert "n2" not in placed
    assert cluster.krex("resume", "--node", "n2").returncode == 0
    missing = cluster.krex("pause")
    assert missing.returncode == 125 and "names its node" in missing.stderr
    with cluster.client() as c:
        snapshot = c.call("snapshot", {"node": "n2"})
    assert set(snapshot) == {"seq", "state"} and len(snapshot["state"]["gpus"]) == 2
    probe = (
        "import sys; from krex_runtime.api import Client; from krex_runtime.api import RequestFailed\n"
        "c = Client(sys.argv[1])\n"
        "for verb, body in (('pause', {'node': 'n1'}), ('lease', {'node': 'n1', 'gpu': 0}), ('submit', {'argv': ['true']})):\n"
        "    try:\n"
        "        c.call(verb, body); print(verb, 'allowed')\n"
        "    except RequestFailed as e:\n"
        "        print(verb, e.code, e.reason)\n"
        "print('status', c.status().node)\n"
    )
    with cluster.client() as c:
        result = c.run([sys.executable, "-c", probe, cluster.endpoint])
    lines = result.stdout.splitlines()
    assert result.ok, result.stderr
    assert [line.split()[:2] for line in lines[:3]] == [["pause", "forbidden"], ["lease", "forbidden"], ["submit", "forbidden"]]
    assert "forbidden to tenants of this cluster" in lines[0] and lines[3] == "status cluster"


def test_telemetry_is_relayed_node_tagged_with_the_cluster_topic(cluster: KrexCluster) -> None:
    import zmq

    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"node/")
    sock.setsockopt(zmq.SUBSCRIBE, b"cluster")
    sock.connect(cluster.telemetry)
    try:
        time.sleep(0.3)  # the subscription reaches the gateway
        with cluster.client() as c:
            result = c.run(["true"], label="relayed", node_labels={"zone": "b"})
        seen_event = seen_cluster = False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (seen_event and seen_cluster):
            if not sock.poll(1000):
                continue
            topic, frame = sock.recv_multipart()
            message = json.loads(frame)
            if topic == b"cluster":
                assert message["type"] == "cluster_nodes" and len(message["body"]["nodes"]) == 3
                assert all("status" not in row for row in message["body"]["nodes"])
                seen_cluster = True
            elif topic == b"node/n3/event" and message.get("id") == result.record["node_command_id"]:
                assert message["node"] == "n3" and "seq" in message
                seen_event = True
            else:
                assert topic.split(b"/")[-1] in (b"event", b"snapshot") and message["node"] == topic.split(b"/")[1].decode()
        assert seen_event and seen_cluster
    finally:
        sock.close(linger=0)


def _saturate_then(cluster: KrexCluster, victim: str, kill: Any, count: int = 40) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fill every node's slots and queues with `count` sleeps (every other one
    with a retry), then `kill` the victim node once its slots are full;
    returns (status before the kill, results by label)."""
    results: list[Any] = []
    errors: list[BaseException] = []
    submitters = 4  # submitting in parallel fills the slots before the first sleeps end, even on a busy machine

    def submit(first: int) -> None:
        try:
            with cluster.client(timeout=60) as c:
                commands = [Command(["sleep", "3"], label=f"k{i}", retries=1 if i % 2 else None)
                            for i in range(first, count, submitters)]
                results.extend(c.map(commands, max_in_flight=count))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,), daemon=True) for i in range(submitters)]
    for thread in threads:
        thread.start()

    def victim_full() -> dict[str, Any] | None:
        with cluster.client() as c:
            status = c.call("status")
        mine = [cmd for cmd in status["commands"] if cmd["node"] == victim]
        running = [cmd for cmd in mine if cmd["state"] == "running"]
        queued = [cmd for cmd in mine if cmd["state"] == "queued"]
        return status if len(running) == 2 * cluster.slots and queued else None

    before = wait_for(victim_full, 60, f"{victim}'s slots full and commands queued behind them")
    kill()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), f"results still awaited: {cluster.rows()}\n{cluster.gateway_log()}"
    return before, results_by_label(results)


def _check_lost_and_replaced(before: dict[str, Any], by_label: dict[str, Any], victim: str, reason: str, count: int) -> None:
    assert len(by_label) == count  # each exactly once
    on_victim = [cmd for cmd in before["commands"] if cmd["node"] == victim]
    for cmd in on_victim:
        r = by_label[cmd["label"]]
        retry = int(cmd["label"][1:]) % 2 == 1
        if cmd["state"] == "queued":  # re-placed on another node, ran there (1 attempt: it was still being sent)
            assert r.ok and r.record["node"] != victim and r.record["attempts"] in (1, 2), (cmd, r.record)
        elif retry:  # lost while it ran, run again
            assert r.ok and r.record["attempts"] == 2, (cmd, r.record)
        else:  # lost while it ran: reported failed, saying why
            assert r.state == "failed" and f"node {victim} was lost while the command ran" in r.reason, (cmd, r.record)
            assert reason in r.reason, r.reason
    elsewhere = [r for label, r in by_label.items() if label not in {cmd["label"] for cmd in on_victim}]
    assert all(r.ok and r.record["attempts"] == 1 for r in elsewhere), [r.record for r in elsewhere if not r.ok][:2]


def test_a_node_whose_runtime_is_killed_loses_its_commands_once_and_rejoins(cluster: KrexCluster) -> None:
    pid = cluster.runtime_pid("n1")
    killed_at = time.time()
    before, by_label = _saturate_then(cluster, "n1", lambda: __import__("os").kill(pid, signal.SIGKILL))
    _check_lost_and_replaced(before, by_label, "n1", "runtime gone: killed by SIGKILL", 40)
    wait_for(lambda: cluster.rows()["n1"]["alive"] and cluster.rows()["n1"]["since"] > killed_at, 60, "n1 back")
    assert cluster.runtime_pid("n1") != pid
    with cluster.client() as c:
        assert c.run(["true"], node_labels={"host": "n1"}).record["node"] == "n1"
    cluster.note_fds("n1")
    for rt in cluster.runtimes.values():
        assert hygiene.held_back(rt.run_dir) == []


def test_a_node_whose_raylet_goes_loses_its_commands_once_and_rejoins(cluster: KrexCluster) -> None:
    removed_at = time.time()
    before, by_label = _saturate_then(cluster, "n2", lambda: cluster.remove_node("n2"))
    _check_lost_and_replaced(before, by_label, "n2", "raylet gone", 40)
    row = cluster.rows()["n2"]
    assert not row["alive"] and row["reason"] == "raylet gone" and row["status"] is None
    cluster.add_node("n2")
    wait_for(lambda: cluster.rows()["n2"]["alive"] and cluster.rows()["n2"]["since"] > removed_at, 90, "n2 back")
    with cluster.client() as c:
        again = list(c.map([["sleep", "0.5"]] * 12, max_in_flight=12))  # spread by load: some go to n2
    assert all(r.ok for r in again) and "n2" in {r.record["node"] for r in again}
    cluster.note_fds("n2")


def test_the_gateway_restarts_adopts_what_the_nodes_run_and_holds_again_what_it_held(cluster: KrexCluster) -> None:
    """One command runs on a node, another is held by the gateway (the only
    node it may run on is down) when the gateway is killed: the next gateway
    adopts the first and holds the second again under its id (its file in the
    run dir), which runs once the node is back and is waited for by that id."""
    cluster.remove_node("n3")
    wait_for(lambda: not cluster.rows()["n3"]["alive"], 60, "n3 down")
    ran = cluster.root / "held-ran"
    attached = cluster.client()
    handle = attached.submit(["sh", "-c", "sleep 4; echo survived"])
    kept = attached.submit(["sh", "-c", f"echo ran >> {ran}; echo held"], label="kept", node_labels={"host": "n3"})
    with cluster.client() as c:
        row = {r["id"]: r for r in c.call("status")["commands"]}[kept.id]
    assert (row["state"], row["node"]) == ("queued", None)
    held_file = cluster.root / "gateway" / "held.json"
    assert [e["id"] for e in json.loads(held_file.read_text())["commands"]] == [kept.id]
    assert held_file.stat().st_mode & 0o777 == 0o600  # bodies carry their environment
    with pytest.raises(TimeoutError):
        handle.wait(timeout=1.5)  # long enough to ping: the client knows which gateway answers
    cluster.stop_gateway(signal.SIGKILL)
    cluster.start_gateway()
    for waited_on in (handle, kept):
        with pytest.raises(RuntimeUnavailable, match="was restarted"):
            waited_on.wait(timeout=60)  # the new gateway has none of the old one's attachments: said, not waited on
    attached.close()
    with cluster.client() as c:
        row = {r["id"]: r for r in c.call("status")["commands"]}[kept.id]
    assert (row["label"], row["state"], row["node"]) == ("kept", "queued", None)
    cluster.add_node("n3")
    cluster.wait_all_up()
    for cid, out in ((handle.id, "survived\n"), (kept.id, "held\n")):
        waited = cluster.krex("wait", "--json", cid)
        assert waited.returncode == 0, waited.stderr
        result = json.loads(waited.stdout)
        assert (result["id"], result["state"], result["stdout"]) == (cid, "finished", out), result
    status = cluster.krex("status")
    assert status.returncode == 0 and "n1" in status.stdout and "up" in status.stdout
    with cluster.client() as c:
        assert c.run(["echo", "after"]).stdout == "after\n"
        assert c.call("wait", {"id": kept.id, "attach": False})["node"] == "n3"
        record = c.call("status")
    assert ran.read_text() == "ran\n"  # run once: on n3, not also on the node the old gateway saw
    assert record["results_dropped"] == 0 and json.loads(held_file.read_text())["commands"] == []
    cluster.note_fds("n3")  # n3's runtime is a new one


def test_no_node_holds_anything_back_or_grew_its_descriptors(cluster: KrexCluster) -> None:
    """After all of the above, every node's runtime is idle as it was: nothing
    frozen, gated or parked, no descriptor more than when it was first idle
    (the runtime now serving each node: n1's and n2's were replaced)."""
    problems: dict[str, list[str]] = {}
    for name, rt in cluster.runtimes.items():
        pid, before = cluster.fds[name]
        assert cluster.runtime_pid(name) == pid

        def clean(rt: Any = rt, pid: int = pid, before: dict[int, str] = before) -> bool:
            return not hygiene.held_back(rt.run_dir) and not hygiene.grown_fds(pid, before)

        try:
            wait_for(clean, 15, f"{name} idle and clean")
        except AssertionError:
            problems[name] = hygiene.held_back(rt.run_dir) + hygiene.grown_fds(pid, before)
    assert not problems, problems
