"""The watch on a tcp socket's CURVE handshakes (a ZeroMQ socket monitor): a
client the runtime refuses hears why at once, instead of waiting for a reply
that never comes. ipc has no handshake, so nothing is watched there."""

from __future__ import annotations

from typing import Any

import zmq

from krex_runtime.transport.errors import RuntimeUnavailable
from krex_runtime.transport.keys import SERVER_KEY_ENV


class HandshakeWatch:
    """Reads the monitor of one socket; `check` raises once a handshake failed."""

    EVENTS = (
        zmq.EVENT_HANDSHAKE_SUCCEEDED
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    )

    def __init__(self, sock: zmq.Socket[Any], endpoint: str) -> None:
        self.endpoint = endpoint
        self._sock = sock
        self.monitor: zmq.Socket[bytes] | None = None
        self.failure: RuntimeUnavailable | None = None
        if endpoint.startswith("tcp://"):
            # A plain socket on the monitored socket's own libzmq context (inproc
            # needs one), also when that socket is an asyncio one: check() never waits.
            address = f"inproc://krex-handshake-{id(self)}"
            sock.monitor(address, self.EVENTS)
            self.monitor = zmq.Context.shadow(sock.context.underlying).socket(zmq.PAIR)
            self.monitor.setsockopt(zmq.LINGER, 0)
            self.monitor.connect(address)

    def check(self) -> None:
        """Read what the monitor has seen; raise if a handshake failed."""
        while self.monitor is not None and self.failure is None and self.monitor.poll(0):
            frames = self.monitor.recv_multipart()
            event = int.from_bytes(frames[0][:2], "little")  # libzmq: u16 event, u32 value, then the address
            self.failure = self._failure_of(event)
        if self.failure is not None:
            raise self.failure

    def _failure_of(self, event: int) -> RuntimeUnavailable | None:
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return RuntimeUnavailable(
                f"the krex runtime at {self.endpoint} refused this client's CURVE key: its public key is not "
                f"among the runtime's runtime.curve_clients (docs/deployment.md)"
            )
        if event in (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL):
            return RuntimeUnavailable(
                f"the CURVE handshake with {self.endpoint} failed: is the server key you named (curve_server_key, "
                f"--curve-server-key or {SERVER_KEY_ENV}) that runtime's public NAME.key, and does a krex runtime "
                f"listen there?"
            )
        return None

    def close(self) -> None:
        if self.monitor is not None:
            self._sock.disable_monitor()
            self.monitor.close(linger=0)
            self.monitor = None
