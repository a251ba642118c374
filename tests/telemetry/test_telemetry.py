"""State on the PUB socket: a late subscriber takes a snapshot, then applies newer events."""

from __future__ import annotations

import json
import time

import zmq

from krex_runtime.testing.local_runtime import Runtime
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.trace.jsonl import read_trace, replay


def _comparable(state: node_state.NodeState) -> dict:
    snap = node_state.to_snapshot(state)
    snap.pop("time")
    return snap


def test_late_subscriber_converges_with_the_runtime(runtime: Runtime) -> None:
    for _ in range(5):
        runtime.krex("run", "--", "true")
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, protocol.TOPIC_EVENT)
    sub.connect(f"ipc://{runtime.run_dir / 'telemetry.sock'}")
    time.sleep(0.3)  # let the subscription reach the publisher before asking for a snapshot
    with runtime.client() as client:
        snap = client.call("snapshot")
    state = node_state.from_snapshot(snap["state"])
    assert state.seq == snap["seq"]
    for i in range(5):
        runtime.krex("run", "--", "sh", "-c", f"exit {i}")
    with runtime.client() as client:
        final = client.call("snapshot")
    applied = 0
    while sub.poll(2000):
        _, frame = sub.recv_multipart()
        event = json.loads(frame)
        if event["seq"] > state.seq:
            node_state.apply(state, event)
            applied += 1
        if state.seq >= final["seq"]:
            break
    sub.close(linger=0)
    assert applied > 0
    expected = node_state.from_snapshot(final["state"])
    assert _comparable(state) == _comparable(expected)


def test_trace_replay_equals_the_live_state(runtime: Runtime) -> None:
    for i in range(4):
        runtime.krex("run", "--", "sh", "-c", f"exit {i}")
    with runtime.client() as client:
        live = client.call("snapshot")
    replayed = replay(read_trace(runtime.trace_path))
    assert replayed.seq >= live["seq"]
    assert _comparable(replay_until_seq(runtime, live["seq"])) == _comparable(node_state.from_snapshot(live["state"]))


def replay_until_seq(runtime: Runtime, seq: int) -> node_state.NodeState:
    state = node_state.NodeState()
    for event in read_trace(runtime.trace_path).events:
        if event["seq"] > seq:
            break
        node_state.apply(state, event)
    return state


def test_snapshots_are_published_periodically(runtime: Runtime) -> None:
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, protocol.TOPIC_SNAPSHOT)
    sub.connect(f"ipc://{runtime.run_dir / 'telemetry.sock'}")
    assert sub.poll(10_000)
    _, frame = sub.recv_multipart()
    body = json.loads(frame)
    sub.close(linger=0)
    assert body["seq"] == body["state"]["seq"]
    assert len(body["state"]["gpus"]) == 2
    assert all(g["simulated"] for g in body["state"]["gpus"])
