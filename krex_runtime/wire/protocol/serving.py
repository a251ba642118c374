"""Serving the control protocol: what the runtime's control sockets
(service/server.py) and the cluster gateway (krex_cluster/gateway.py) do
alike with each request.

`InFlight` bounds the requests being answered, per connection and in all
(one more is answered `busy` at once, for the cost of a short reply);
`answer` decodes one request, lets the server's route check who may ask it
and run its verb's handler, and sends the reply, or the error reply: the
protocol's refusal, or `internal` when the handler failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol import verbs
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError, Request

# A refused request's id is read only from a message this small (parsing a
# large one would cost what the refusal saves).
BUSY_ID_BYTES = 4096
# What a handler returns when it sent its reply itself (pushes follow it).
SENT: Any = object()

Route = Callable[[Request], Awaitable[Any]]
Send = Callable[[dict[str, Any]], object]


def check_handlers(handlers: Mapping[str, object], server: str) -> None:
    """Every verb of the table has a handler, and every handler a verb."""
    missing, unknown = set(verbs.VERBS) - set(handlers), set(handlers) - set(verbs.VERBS)
    if missing or unknown:
        raise AssertionError(f"{server}: verbs without a handler {sorted(missing)}, handlers without a verb {sorted(unknown)}")


class InFlight:
    """The requests being answered on one socket: at most `per_peer` of one
    connection (its routing frames) and `in_all` in all."""

    def __init__(self, per_peer: int, in_all: int, where: str) -> None:
        self.per_peer, self.in_all, self.where = per_peer, in_all, where
        self.count = 0
        self._by_peer: dict[Hashable, int] = {}

    def busy(self, peer: Hashable) -> str:
        """Why one more request of this connection is refused now ("" if it is not)."""
        if self._by_peer.get(peer, 0) >= self.per_peer:
            return f"this client has {self.per_peer} requests being answered: try again when they are"
        if self.count >= self.in_all:
            return f"{self.where} has {self.in_all} requests being answered: try again later"
        return ""

    def track(self, peer: Hashable, answering: asyncio.Future[Any]) -> None:
        """Count a request of this connection as being answered until `answering` ends."""
        self.count += 1
        self._by_peer[peer] = self._by_peer.get(peer, 0) + 1
        answering.add_done_callback(lambda _: self._answered(peer))

    def _answered(self, peer: Hashable) -> None:
        self.count -= 1
        left = self._by_peer[peer] - 1
        if left:
            self._by_peer[peer] = left
        else:
            del self._by_peer[peer]


def busy_reply(frame: bytes, reason: str) -> dict[str, Any]:
    """The `busy` error reply to a request that is not served, naming it when it is small enough to read."""
    req_id = protocol.request_id_of(frame) if len(frame) <= BUSY_ID_BYTES else None
    return protocol.reply_error(req_id, ErrorCode.BUSY, reason)


async def answer(frame: bytes, max_bytes: int, route: Route, send: Send, log: logging.Logger) -> None:
    """Answer one request: decode and validate it (envelope, version, the
    verb's body), hand it to `route`, which refuses who may not ask it
    (ProtocolError) or returns its handler's reply body, and send the reply.
    The caller hands its frame over: it is let go once decoded."""
    req_id = None
    try:
        req = protocol.decode_request(frame, max_bytes)
        req_id = req.id
        frame = b""  # answered later (a `wait` when its command ends): not its bytes kept till then
        body = await route(req)
        if body is not SENT:
            send(protocol.reply_ok(req_id, body))
    except ProtocolError as exc:
        send(protocol.reply_error(req_id or protocol.request_id_of(frame), exc.code, exc.reason))
    except Exception as exc:
        log.exception("request failed")
        send(protocol.reply_error(req_id, ErrorCode.INTERNAL, f"internal error: {exc!r}"))
