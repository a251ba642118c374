"""Limits a hostile client meets where its bytes arrive, with real runtimes:
a message over `runtime.max_message_bytes` is refused by zmq as it reads the
frame's size (the connection is closed, no handler sees it) on every socket
the runtime binds; the memory a flood of messages at the limit takes is
bounded while it lasts and given back when it ends; the metrics endpoint
holds at most `telemetry.prometheus_max_connections` connections and closes
idle ones."""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

import psutil
import zmq
from control_flood import Flood
from zmq.utils.monitor import recv_monitor_message

from krex_runtime.testing.local_runtime import wait_until
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol

LIMIT = 65536  # runtime.max_message_bytes of these runtimes


def _status_of_size(size: int) -> tuple[str, bytes]:
    """A valid `status` request of exactly `size` bytes (padded with spaces)."""
    msg = protocol.request("status")
    head = protocol.encode(msg)
    return msg["id"], head[:-1] + b" " * (size - len(head)) + b"}"


class Connection:
    """A DEALER to one of the runtime's sockets that sees its disconnections."""

    def __init__(self, ctx: zmq.Context, endpoint: str, kind: int = zmq.DEALER) -> None:
        self.sock = ctx.socket(kind)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        self.sock.connect(endpoint)
        self.wait_for(zmq.EVENT_CONNECTED)

    def wait_for(self, event: int, timeout_s: float = 30.0) -> None:
        def seen() -> bool:
            while self.monitor.poll(0):
                if recv_monitor_message(self.monitor)["event"] == event:
                    return True
            return False

        wait_until(seen, timeout_s, f"zmq event {event}")

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
        self.sock.close(linger=0)


def test_a_message_over_the_limit_closes_its_connection_unanswered_on_every_socket(make_runtime: Any) -> None:
    rt = make_runtime(sim=1, runtime_extra=f"max_message_bytes = {LIMIT}")
    ctx = zmq.Context()
    try:
        for endpoint in (endpoints.control(rt.run_dir), endpoints.control_read_only(rt.run_dir)):
            conn = Connection(ctx, endpoint)
            try:
                at_limit, frame = _status_of_size(LIMIT)
                conn.sock.send(frame)
                assert conn.sock.poll(30_000), f"{endpoint}: no reply to a message of exactly the limit"
                reply = protocol.decode_reply(conn.sock.recv())
                assert reply["re"] == at_limit and reply["ok"], reply
                _, over = _status_of_size(LIMIT + 1)
                conn.sock.send(over)
                # zmq closed the connection on reading the frame's size: nothing read it.
                conn.wait_for(zmq.EVENT_DISCONNECTED)
                assert not conn.sock.poll(0), f"{endpoint}: a message over the limit was answered"
            finally:
                conn.close()
            with rt.client() as c:  # the runtime answers on
                assert c.call("status")["policy"] == "ungated"
        # The telemetry socket reads only subscriptions: a large one is refused the same way.
        sub = Connection(ctx, endpoints.telemetry(rt.run_dir), zmq.SUB)
        try:
            sub.sock.setsockopt(zmq.SUBSCRIBE, b"x" * LIMIT)
            sub.wait_for(zmq.EVENT_DISCONNECTED)
        finally:
            sub.close()
        with rt.client() as c:
            assert c.call("status")["policy"] == "ungated"
    finally:
        ctx.term()


def test_a_flood_of_messages_at_the_limit_takes_bounded_memory_and_gives_it_back(make_runtime: Any) -> None:
    """A sanity bound with a wide margin, not a measurement: 4 connections
    sending 1 MiB requests once grew the runtime by 500 MiB, and it stayed
    there after they closed; now each connection can park at most 16 of them,
    and the buffers go back to the system once freed."""
    rt = make_runtime(sim=1)  # the default limit, 1 MiB
    runtime = psutil.Process(rt.proc.pid)
    before = runtime.memory_info().rss
    _, frame = _status_of_size(1 << 20)
    flood = Flood(endpoints.control_read_only(rt.run_dir), frame, count=1500)
    peak = 0
    flood.start()
    try:
        while flood.is_alive():
            peak = max(peak, runtime.memory_info().rss)
            flood.join(0.05)
    finally:
        flood.stop.set()
        flood.join()
    assert flood.sent == 1500
    with rt.client() as c:
        assert c.call("status")["policy"] == "ungated"
    assert peak - before < 250 << 20, f"RSS grew {(peak - before) >> 20} MiB under the flood"
    wait_until(lambda: runtime.memory_info().rss - before < 64 << 20, 30, "the flood's memory to be given back")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_metrics_endpoint_holds_a_few_connections_and_closes_idle_ones(make_runtime: Any) -> None:
    """Thousands of connections that never send a request once stalled the
    runtime's event loop; now it accepts 4 at a time, closes each idle one
    after its timeout, and answers on throughout."""
    port = _free_port()
    rt = make_runtime(sim=1, extra_config=f'prometheus_listen = "127.0.0.1:{port}"\nprometheus_max_connections = 4\n')
    runtime = psutil.Process(rt.proc.pid)

    def accepted() -> set[tuple[str, int]]:
        return {c.raddr for c in runtime.net_connections("tcp")
                if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED}

    silent = []
    try:
        for _ in range(300):  # connected, never a request (the kernel queues what the runtime does not accept)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            silent.append(s)
        first = wait_until(lambda: (found := accepted()) and len(found) >= 4 and found, 30, "4 connections accepted")
        assert len(first) == 4, first
        for _ in range(3):
            with rt.client() as c:  # the runtime serves on
                assert c.call("status")["policy"] == "ungated"
            assert len(accepted()) <= 4
        # The idle ones are closed after their timeout; queued ones take their places.
        wait_until(lambda: not (first & accepted()), 60, "the first idle connections closed")
        assert len(accepted()) <= 4
    finally:
        for s in silent:
            s.close()

    def scraped() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                return reply.status == 200 and b"krex_runtime_info" in reply.read()
        except OSError:
            return False

    wait_until(scraped, 120, "a scrape once the silent connections were gone")
