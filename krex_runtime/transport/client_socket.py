"""Opening a client's socket to a runtime, the one way: on the asyncio
context, lingering nothing at close, the ipc endpoint checked for access and
a tcp one given this client's CURVE keys, before it connects."""

from __future__ import annotations

import zmq
import zmq.asyncio

from krex_runtime.transport.errors import RuntimeUnavailable
from krex_runtime.transport.keys import CurveKeys, use_curve
from krex_runtime.transport.reachable import check_reachable


def client_socket(kind: int, endpoint: str, keys: CurveKeys | None, check_access: bool) -> zmq.asyncio.Socket:
    """A socket of `kind` ready to connect to `endpoint` (the caller sets its
    options and connects); RuntimeUnavailable, and nothing left open, when the
    endpoint is closed to this user or its keys cannot be had."""
    sock = zmq.asyncio.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if check_access:
            check_reachable(endpoint)
        use_curve(sock, endpoint, keys)
    except RuntimeUnavailable:
        sock.close()
        raise
    return sock
