"""A connection to a runtime's control socket: one DEALER on the asyncio
context, with this client's CURVE keys on tcp and a watch on its handshake.

It moves frames only; what they mean (requests, replies, pushes) is the
protocol's (krex_runtime.wire) and the client's (krex_runtime.api).
"""

from __future__ import annotations

import asyncio

import zmq

from krex_runtime.transport.client_socket import client_socket
from krex_runtime.transport.errors import RuntimeUnavailable
from krex_runtime.transport.handshake import HandshakeWatch
from krex_runtime.transport.keys import CurveKeys

# A DEALER whose only peer refused it (a CURVE key the runtime does not
# admit) has no pipe left to queue into, and a plain send then waits forever.
SEND_TIMEOUT_S = 5.0


class Connection:
    """One control connection. `check_access`: fail at once on an ipc socket
    that is missing or closed to this user (off for a caller that waits for a
    runtime still starting). `unbounded_queue`: keep everything the runtime
    sends until it is read (a runtime drops what a client's full queue cannot
    take, and stalls that client)."""

    def __init__(self, endpoint: str, keys: CurveKeys | None = None, *, check_access: bool = True,
                 unbounded_queue: bool = False) -> None:
        self.endpoint = endpoint
        self._sock = client_socket(zmq.DEALER, endpoint, keys, check_access)
        if unbounded_queue:
            self._sock.setsockopt(zmq.RCVHWM, 0)
        self._handshake = HandshakeWatch(self._sock, endpoint)
        self._sock.connect(endpoint)

    def check(self) -> None:
        """Raise RuntimeUnavailable if the runtime refused this client's handshake."""
        self._handshake.check()

    async def send(self, frame: bytes) -> None:
        """Send one frame, bounded: a refused client has no connection left to send on."""
        self._handshake.check()
        try:
            await asyncio.wait_for(self._sock.send(frame), SEND_TIMEOUT_S)
        except TimeoutError:
            self._handshake.check()
            raise RuntimeUnavailable(f"cannot send to the krex runtime at {self.endpoint}: no connection") from None

    async def receive(self, timeout_s: float | None) -> bytes | None:
        """The next frame, or None when nothing came within `timeout_s` (None:
        wait as long as it takes); RuntimeUnavailable once the handshake failed."""
        ready = await self._sock.poll(int(timeout_s * 1000) if timeout_s is not None else None)
        self._handshake.check()
        if not ready:
            return None
        return await self._sock.recv()

    def close(self) -> None:
        self._handshake.close()
        self._sock.close(linger=0)
