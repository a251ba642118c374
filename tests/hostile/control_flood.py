"""A flood of control requests, the hostile client the flood and limit tests share."""

from __future__ import annotations

import math
import threading
import time

import zmq


class Flood(threading.Thread):
    """One request frame sent as fast as the runtime takes it, from a few
    connections, until stopped, `count` are sent or `seconds` have passed;
    with `read_replies` each connection's replies are read and dropped as
    they come, else none is read."""

    def __init__(self, endpoint: str, frame: bytes, count: int, *, seconds: float = math.inf, connections: int = 4,
                 read_replies: bool = True) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.frame, self.count, self.connections = endpoint, frame, count, connections
        self.seconds, self.read_replies = seconds, read_replies
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        ctx = zmq.Context()
        socks = [ctx.socket(zmq.DEALER) for _ in range(self.connections)]
        for s in socks:
            s.setsockopt(zmq.LINGER, 0)
            s.connect(self.endpoint)
        deadline = time.monotonic() + self.seconds
        while not self.stop.is_set() and self.sent < self.count and time.monotonic() < deadline:
            for s in socks:
                try:
                    s.send(self.frame, zmq.NOBLOCK)
                    self.sent += 1
                except zmq.Again:
                    self.stop.wait(0.0005)  # the runtime pushes back: its queue for this connection is full
                while self.read_replies and s.poll(0):
                    s.recv()
        for s in socks:
            s.close(linger=0)
        ctx.term()
