"""The control and telemetry sockets: bind them with their access rules, serve
requests through the verb handlers, send replies and publish.

Control (ROUTER) answers requests; a read-only control socket serves the same
table and refuses the verbs that change state; telemetry (PUB) carries events
and snapshots. ipc sockets are guarded by file permissions (node/access.py);
tcp endpoints are served with CURVE only, on sockets of their own.

The region plane shares the event loop, so the control plane's work is
bounded whatever clients send: zmq itself closes a connection whose message
is larger than `runtime.max_message_bytes` as it reads the frame's size (a
telemetry subscriber's, larger than a subscription), so no such message is
buffered or handled, and at most RECEIVE_QUEUE messages of each connection
wait unread; the serving loop yields after every message
(a socket that always has one ready would otherwise never let the loop run
anything else); at most `runtime.max_requests_per_peer` requests of one
connection and `runtime.max_requests_in_flight` per socket are being answered,
and one more is refused `busy` at once, for the cost of a short reply; a
connection that leaves its replies unread until its queue is full is not
served until STALL_S later (its requests get a `busy` reply where its queue
has room again), and the next reply it gets says how many messages to it
were lost (`dropped`).
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import zmq
import zmq.asyncio

from krex_runtime.node import access
from krex_runtime.node.config import Config
from krex_runtime.service import curve
from krex_runtime.service.event_log import Encoded
from krex_runtime.service.host import StartupError
from krex_runtime.wire.protocol import endpoints, peers, serving, verbs
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError, Request
from krex_runtime.wire.protocol.peers import Credentials

log = logging.getLogger("krex.runtime")

# How long a connection whose reply queue was full is not served.
STALL_S = 1.0
STALLED = "this client left its replies unread until its queue was full: messages to it were dropped (see `dropped`)"
# Requests queued unread per connection. With the message limit it bounds
# what one connection can park in the runtime: 16 x runtime.max_message_bytes.
RECEIVE_QUEUE = 16
# A CURVE frame is its message in a box: the MESSAGE command, nonce and MAC.
CURVE_OVERHEAD = 64
# The most a telemetry subscriber may send in one message (a subscription).
SUBSCRIPTION_BYTES = 4096


@dataclass(frozen=True)
class Peer:
    """Who sent a request: the socket it came on, its routing frames, and on
    ipc the kernel's word on the sending process (None where libzmq has none)."""

    socket: zmq.asyncio.Socket
    route: tuple[bytes, ...]
    read_only: bool
    credentials: Credentials | None = None
    remote: bool = False  # came over tcp, from a client with an authorized CURVE key
    key_name: str = ""  # tcp: the name of that key (NAME.key in runtime.curve_clients)


Handler = Callable[[Peer, Request], Awaitable[Any]]
# Raises ProtocolError(forbidden) when the peer is a tenant of this runtime.
Refuse = Callable[[Peer, str], None]


class ControlServer:
    def __init__(self, config: Config, run_dir: Any, curve_keys: curve.ServerKeys | None) -> None:
        self.config = config
        self.run_dir = run_dir
        self.ctx = zmq.asyncio.Context()
        self.authenticator: Any = None
        self.remote_control: zmq.asyncio.Socket | None = None
        self.remote_pub: zmq.asyncio.Socket | None = None
        self._stalled: dict[tuple[int, tuple[bytes, ...]], float] = {}  # -> served again from (monotonic)
        # Messages to a connection lost to its full queue since its last reply:
        # that reply says how many (`dropped`), so the client can ask again.
        self._dropped: dict[tuple[int, tuple[bytes, ...]], int] = {}
        self.refused_busy = 0
        self.dropped_stalled = 0
        return_large_buffers()
        self.control = self._router()
        self.control_ro = self._router()
        self.pub = self._publisher()
        self._bind(curve_keys)

    def _bind(self, keys: curve.ServerKeys | None) -> None:
        """The ipc sockets, each with its owner, group and mode; tcp endpoints
        on sockets of their own, served with CURVE only."""
        try:
            _bind_to(self.control, endpoints.control(self.run_dir))
            _bind_to(self.control_ro, endpoints.control_read_only(self.run_dir))
            _bind_to(self.pub, endpoints.telemetry(self.run_dir))
            read_only = access.read_only_access(self.config)
            access.apply(self.run_dir / endpoints.CONTROL_SOCKET, access.control_access(self.config))
            access.apply(self.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET, read_only)
            access.apply(self.run_dir / endpoints.TELEMETRY_SOCKET, read_only)
            if keys is None:
                return
            self.authenticator = curve.start_authenticator(self.ctx, keys)
            if self.config.runtime.control_tcp:
                self.remote_control = self._router(keys)
                _bind_to(self.remote_control, self.config.runtime.control_tcp)
            if self.config.runtime.telemetry_tcp:
                self.remote_pub = self._publisher(keys)
                _bind_to(self.remote_pub, self.config.runtime.telemetry_tcp)
        except BaseException:
            self.close()
            raise

    def _router(self, keys: curve.ServerKeys | None = None) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.ROUTER)
        # Where the bytes arrive: zmq reads a frame's size first and closes a
        # connection that announces more than the limit, before it buffers any
        # of it. (A larger limit here let each connection park RECEIVE_QUEUE
        # messages of that size in the runtime.) CURVE frames carry their box.
        sock.setsockopt(zmq.MAXMSGSIZE, self.config.runtime.max_message_bytes + (CURVE_OVERHEAD if keys else 0))
        # Mandatory: a reply to a connection whose queue is full raises instead of
        # vanishing, so the server learns the peer does not read (see send).
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.LINGER, 0)
        # Replies and pushes queued per connection that does not read (see send).
        sock.setsockopt(zmq.SNDHWM, self.config.runtime.reply_queue)
        # Requests queued unread per connection: past this the client's sends
        # wait (backpressure) instead of the runtime buffering them.
        sock.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
        if keys is not None:
            curve.serve_with(sock, keys)
        return sock

    def _publisher(self, keys: curve.ServerKeys | None = None) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.PUB)
        # What a subscriber sends is its subscriptions (a topic each): small.
        sock.setsockopt(zmq.MAXMSGSIZE, SUBSCRIPTION_BYTES)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        if keys is not None:
            curve.serve_with(sock, keys)
        return sock

    # --- publishing ----------------------------------------------------------

    def publish(self, topic: bytes, body: Any) -> None:
        encoded = isinstance(body, Encoded)
        frames = [topic, body.data if encoded else protocol.encode(body)]
        for pub in (self.pub, self.remote_pub):
            if pub is not None:
                # One message, shared (refcounted by libzmq) by the queues of every
                # subscriber. Copied once into it: a zero-copy send would start
                # pyzmq's garbage-collector thread and its own zmq context for good.
                pub.send_multipart(frames)

    # --- requests ------------------------------------------------------------

    def serve(self, handlers: dict[str, Handler], refuse_tenants: Refuse) -> list[asyncio.Task[None]]:
        """One task per control socket; each request runs on its own task."""
        serving.check_handlers(handlers, "the runtime")
        sockets = [(self.control, False, False), (self.control_ro, True, False)]
        if self.remote_control is not None:
            sockets.append((self.remote_control, False, True))
        return [
            asyncio.create_task(self._serve(sock, read_only, remote, handlers, refuse_tenants))
            for sock, read_only, remote in sockets
        ]

    async def _serve(
        self, sock: zmq.asyncio.Socket, read_only: bool, remote: bool, handlers: dict[str, Handler], refuse: Refuse
    ) -> None:
        runtime = self.config.runtime
        # Per socket: a flood of the read-only one leaves operators theirs.
        requests = serving.InFlight(runtime.max_requests_per_peer, runtime.max_requests_in_flight, "this socket")
        while True:
            frames = await sock.recv_multipart(copy=False)
            # A ready message resolves the await at once: yield, or a flood on
            # one socket would keep the loop (regions, heartbeat) from running.
            await asyncio.sleep(0)
            if len(frames) < 2:
                continue
            route = tuple(f.bytes for f in frames[:-1])
            key = (id(sock), route)
            if key in self._stalled:
                if time.monotonic() < self._stalled[key]:
                    self.dropped_stalled += 1
                    # Not served, but answered `busy` if its queue has room again:
                    # that reply ends the stall and says what was lost (`dropped`).
                    if self._refuse(Peer(sock, route, read_only), frames[-1].bytes, STALLED):
                        del self._stalled[key]
                    continue
                del self._stalled[key]
            busy = requests.busy(route)
            if busy:
                self.refused_busy += 1
                self._refuse(Peer(sock, route, read_only), frames[-1].bytes, busy)
                continue
            credentials = None if remote else peers.ipc_credentials(frames[-1])
            peer = Peer(sock, route, read_only, credentials, remote, peers.curve_user(frames[-1]) if remote else "")
            # Each request runs on its own so a `wait` never blocks the socket.
            route_to = functools.partial(self._route, peer, handlers, refuse)
            answering = serving.answer(frames[-1].bytes, runtime.max_message_bytes, route_to,
                                       functools.partial(self.send, peer), log)
            requests.track(route, asyncio.create_task(answering))

    def _refuse(self, peer: Peer, frame: bytes, reason: str) -> bool:
        """Answer `busy` for the cost of a short reply; whether it was sent at once."""
        return self.send(peer, serving.busy_reply(frame, reason)) is True

    @staticmethod
    async def _route(peer: Peer, handlers: dict[str, Handler], refuse: Refuse, req: Request) -> Any:
        """Refuse what changes state on the read-only socket or from a tenant; else the verb's handler."""
        if req.type in verbs.CHANGING:
            if peer.read_only:
                raise ProtocolError(ErrorCode.REFUSED, f"'{req.type}' is refused on the read-only control socket")
            refuse(peer, req.type)
        return await handlers[req.type](peer, req)

    def send(self, peer: Peer, msg: dict[str, Any]) -> bool | None:
        """Send without waiting: True when sent, False when the peer's queue was
        full (dropped, and counted for its next reply), None when not known yet."""
        key = (id(peer.socket), peer.route)
        lost = self._dropped.pop(key, 0) if msg.get("type") == "reply" else 0
        if lost:
            msg = {**msg, "dropped": lost}
        # zmq.asyncio reports a failed non-blocking send in the future it returns,
        # not by raising; behind other sends still pending, only later.
        sent = cast("asyncio.Future[Any]",  # zmq.asyncio's send is a Future, typed only as Awaitable
                    peer.socket.send_multipart([*peer.route, _encode_reply(msg)], flags=zmq.NOBLOCK))
        if sent.done():
            return self._sent(key, sent, lost)
        sent.add_done_callback(lambda f: self._sent(key, f, lost))
        return None

    def _sent(self, key: tuple[int, tuple[bytes, ...]], sent: asyncio.Future[Any], lost: int) -> bool:
        exc = None if sent.cancelled() else sent.exception()
        if isinstance(exc, zmq.Again):
            # Its queue is full: it does not read. Memory stays bounded by that
            # queue, and its next requests are only answered `busy` for a while.
            if len(self._stalled) > 10_000:
                now = time.monotonic()
                self._stalled = {k: t for k, t in self._stalled.items() if t > now}
                self._dropped = {k: n for k, n in self._dropped.items() if k in self._stalled}
            self._stalled[key] = time.monotonic() + STALL_S
            self._dropped[key] = self._dropped.get(key, 0) + lost + 1  # this one, and what it was to report
        elif exc is not None:  # a peer that went away must not disturb the service
            log.debug("dropping a message to a departed peer: %s", exc)
        return exc is None

    def close(self) -> None:
        if self.refused_busy or self.dropped_stalled:
            log.info("control sockets: %d request(s) refused busy, %d dropped unread from clients that did not read",
                     self.refused_busy, self.dropped_stalled)
        if self.authenticator is not None:
            self.authenticator.stop()
        for sock in (self.control, self.control_ro, self.pub, self.remote_control, self.remote_pub):
            if sock is not None:
                sock.close(linger=0)
        self.ctx.term()
        for name in endpoints.SOCKETS:
            (self.run_dir / name).unlink(missing_ok=True)


# glibc's mallopt(M_MMAP_THRESHOLD): blocks from this size up are mapped on
# their own and unmapped when freed.
M_MMAP_THRESHOLD, LARGE_BUFFER = -3, 128 << 10


def return_large_buffers() -> None:
    """Give large message buffers back to the system when they are freed.
    glibc maps a large block on its own, but raises that threshold to the size
    of each such block freed: after a burst of large messages the next ones
    come from the heap, which stays at its peak (a flood of 1 MB requests left
    the runtime at 500 MiB once it ended). Fixing the threshold keeps it from
    rising. Nothing to do where the C library has no mallopt."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER)
    except (AttributeError, OSError):
        pass


def _encode_reply(msg: dict[str, Any]) -> bytes:
    """A message as its one frame; a body already encoded (a snapshot, encoded
    once per sequence number) is put in as it is rather than encoded again."""
    body = msg.get("body")
    if not isinstance(body, Encoded):
        return protocol.encode(msg)
    head = protocol.encode({k: v for k, v in msg.items() if k != "body"})
    return head[:-1] + b',"body":' + body.data + b"}"


def _bind_to(sock: zmq.asyncio.Socket, endpoint: str) -> None:
    """Bind, or stop the start-up with one line that names the endpoint (an ipc
    path too long for sun_path, a tcp address in use...)."""
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        raise StartupError(f"cannot serve on {endpoint}: {exc}") from None
