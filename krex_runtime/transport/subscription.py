"""A subscription to a runtime's telemetry (its PUB socket): one SUB on the
asyncio context, with this client's CURVE keys on tcp.

A reader that falls behind drains what is queued (`pending`) before it
shows anything, so the queue is as deep as the runtime's send queue: a
moment behind is caught up instead of dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

import zmq

from krex_runtime.transport.client_socket import client_socket
from krex_runtime.transport.keys import CurveKeys

# As deep as the runtime's PUB send queue (a gap costs the reader a snapshot).
QUEUE_DEPTH = 100_000


class Subscription:
    """Telemetry messages (topic, body frames) of the given topic prefixes
    (b"": all of them). `check_access` as for a Connection."""

    def __init__(self, endpoint: str, topics: Iterable[bytes], keys: CurveKeys | None = None, *,
                 check_access: bool = True) -> None:
        self.endpoint = endpoint
        self._sock = client_socket(zmq.SUB, endpoint, keys, check_access)
        self._sock.setsockopt(zmq.RCVHWM, QUEUE_DEPTH)
        for topic in topics:
            self._sock.setsockopt(zmq.SUBSCRIBE, topic)
        self._sock.connect(endpoint)

    async def wait(self, timeout_s: float | None) -> bool:
        """Whether a message came within `timeout_s` (None: wait as long as it takes)."""
        return bool(await self._sock.poll(int(timeout_s * 1000) if timeout_s is not None else None))

    def pending(self) -> bool:
        """A message is queued and can be read without waiting."""
        events = self._sock.getsockopt(zmq.EVENTS)
        return isinstance(events, int) and bool(events & zmq.POLLIN)

    async def receive(self) -> list[bytes]:
        """The next message's frames (its topic first)."""
        return await self._sock.recv_multipart()

    def close(self) -> None:
        self._sock.close(linger=0)
