"""A flood of requests on the read-only control socket never stalls the
region plane: while a client sends `snapshot` requests as fast as it can and
never reads a reply, `krex status` answers, the gate's heartbeat keeps
ticking (no tenant fails open), and a region held past the hold limit is
revoked, its frozen tenant thawed. The flood is bounded in count and time."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import zmq
from control_flood import Flood
from runtime_helpers import PY, TENANTS, busy, cgroup_root, finish, frozen_cgroups, submit, wait_ready

from krex_runtime.regions.gate.core import Gate, GateError
from krex_runtime.testing.local_runtime import wait_until
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.trace.jsonl import read_trace

STALE_AFTER_S = 3.0
# Bounds of the flood; it is stopped as soon as what it must not delay has happened.
FLOOD_S, FLOOD_MAX = 60.0, 3_000_000


class HeartbeatWatch(threading.Thread):
    """The oldest heartbeat the gate showed while watched."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.gate = Gate.attach(path)
        self.oldest_s = 0.0
        self.beats: set[int] = set()
        self.fail_open: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                beat = self.gate.heartbeat_ns
                self.oldest_s = max(self.oldest_s, (time.monotonic_ns() - beat) / 1e9)
                self.beats.add(beat)
                self.fail_open |= {e.pid for e in self.gate.processes() if e.fail_open}
            except GateError:
                return
        self.gate.detach()


def _revoked(trace: Path) -> list[dict[str, Any]]:
    return [e for e in read_trace(trace).events if e["type"] == "region_released" and "limit" in e.get("reason", "")]


def test_a_snapshot_flood_does_not_stall_status_heartbeat_or_the_hold_limit(make_runtime: Any) -> None:
    regions = f"[regions]\nhold_limit_s = 2.0\nstale_after_s = {STALE_AFTER_S}\nheartbeat_interval_s = 0.5\n"
    rt = make_runtime(policy="krex", sim=1, slots=8, extra_config=regions)
    other = busy(rt)
    wait_ready(rt, other)
    watch = HeartbeatWatch(rt.run_dir / "gates" / "gpu0.gate")
    watch.start()
    runtime = psutil.Process(rt.proc.pid)
    rss_before = runtime.memory_info().rss
    flood = Flood(endpoints.control_read_only(rt.run_dir), protocol.encode(protocol.request("snapshot")), FLOOD_MAX,
                  seconds=FLOOD_S, read_replies=False)
    flood.start()
    try:
        wait_until(lambda: flood.sent > 20_000 or not flood.is_alive(), 30, "the flood to be under way")
        holder = submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--hold-s", "1000")
        for _ in range(3):
            done = rt.krex("status", "--json", timeout=60)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["policy"] == "krex"
        # The hold limit (2 s) is enforced while the flood goes on.
        wait_until(lambda: _revoked(rt.trace_path), 60, "the region held past its limit to be revoked")
        root = cgroup_root(rt)
        wait_until(lambda: not frozen_cgroups(root), 30, "the other tenant thawed")
        assert flood.is_alive(), f"the flood ended ({flood.sent} requests) before what it must not delay was done"
        rss_after = runtime.memory_info().rss
        watch.stop.set()
        watch.join()
        assert rt.stop() == 0  # SIGTERM is served under the flood too, and the stop leaves nothing
    finally:
        flood.stop.set()
        flood.join()
        watch.stop.set()
        watch.join()
    assert watch.oldest_s < STALE_AFTER_S, f"the heartbeat was {watch.oldest_s:.1f} s old during the flood"
    assert len(watch.beats) > 3 and not watch.fail_open
    assert rss_after - rss_before < 200 << 20, f"RSS grew {(rss_after - rss_before) >> 20} MiB under the flood"
    assert {e["id"] for e in read_trace(rt.trace_path).events if e["type"] == "command_finished"} >= {holder, other}


def test_requests_past_the_bounds_are_refused_busy_at_once(make_runtime: Any) -> None:
    rt = make_runtime(sim=1, runtime_extra="max_requests_in_flight = 6\nmax_requests_per_peer = 4")
    sleeper = submit(rt, "sleep", "60")
    ctx = zmq.Context()
    peers = [ctx.socket(zmq.DEALER) for _ in range(2)]
    try:
        replies: list[list[dict[str, Any]]] = []
        for sock, refused in zip(peers, (1, 3), strict=True):
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, 30_000)
            sock.connect(endpoints.control_read_only(rt.run_dir))
            for _ in range(5):  # `wait`s stay in flight until the command ends
                sock.send(protocol.encode(protocol.request("wait", {"id": sleeper, "attach": False})))
            # The first: its fifth is over the per-connection bound (4); the second:
            # two more fill the socket's 6, its last three are over.
            replies.append([json.loads(sock.recv()) for _ in range(refused)])
        first, second = replies
        busy = [r for group in replies for r in group]
        assert all(not r["ok"] and r["error"]["code"] == "busy" for r in busy), [(r["ok"], r.get("error"), r.get("body")) for r in busy]
        assert "this client has 4 requests" in first[0]["error"]["reason"]
        assert all("this socket has 6 requests" in r["error"]["reason"] for r in second)
        # The operators' socket has its own budget.
        done = rt.krex("status", "--json")
        assert done.returncode == 0, done.stderr
        finish(rt, sleeper)
        answered = [json.loads(peers[0].recv()) for _ in range(4)] + [json.loads(peers[1].recv()) for _ in range(2)]
        assert all(r["ok"] for r in answered), answered
    finally:
        for sock in peers:
            sock.close(linger=0)
        ctx.term()



# A client in its own process, stopped (SIGSTOP: its zmq I/O thread too, so
# nothing is read at all) while its command writes 4 MB: far more than the
# socket buffers and a reply queue of 16 hold, so output and result are dropped.
FOLLOWER = """
import asyncio, json, sys
from krex_runtime.api import AsyncClient, Client
endpoint, kind = sys.argv[1], sys.argv[2]
argv = [sys.executable, "-c", "import sys, time; time.sleep(1); sys.stdout.write('x' * 4_000_000); sys.stdout.flush()"]
def report(r):
    print(json.dumps({"state": r.state, "incomplete": r.output_incomplete, "got": len(r.stdout), "path": r.record["stdout_path"]}))
if kind == "sync":
    with Client(endpoint, timeout=30) as krex:
        handle = krex.submit(argv)
        print(handle.id, flush=True)
        report(handle.wait(timeout=120))
else:
    async def main():
        async with AsyncClient(endpoint, timeout=30) as krex:
            handle = await krex.submit(argv)
            print(handle.id, flush=True)
            report(await handle.wait(timeout=120))
    asyncio.run(main())
"""


def test_a_client_that_did_not_read_hears_what_was_dropped_and_still_gets_its_result(make_runtime: Any) -> None:
    from krex_runtime.api import Client

    rt = make_runtime(sim=1, runtime_extra="reply_queue = 16")
    endpoint = f"ipc://{rt.run_dir / 'control.sock'}"
    for kind in ("sync", "async"):
        child = subprocess.Popen([PY, "-c", FOLLOWER, endpoint, kind], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        try:
            command_id = child.stdout.readline().strip()
            child.send_signal(signal.SIGSTOP)
            with Client(endpoint, timeout=120) as other:
                other.call("wait", {"id": command_id, "attach": False})  # answers once it has ended
            child.send_signal(signal.SIGCONT)
            out, err = child.communicate(timeout=120)
        finally:
            child.send_signal(signal.SIGCONT)
            child.kill()
            child.wait()
        assert out.strip(), f"{kind}: the follower said nothing: {err[-2000:]}"
        result = json.loads(out.strip().splitlines()[-1])
        # It read again, was told of the drops, and asked for the result again.
        assert result["state"] == "finished", (kind, result)
        assert result["incomplete"] and result["got"] < 4_000_000, (kind, result)
        assert Path(result["path"]).stat().st_size == 4_000_000  # the file has it all
