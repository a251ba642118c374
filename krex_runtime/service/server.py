"""The control and telemetry sockets: bind them with their access rules, serve
requests through the verb handlers, send replies and publish.

Control (ROUTER) answers requests; a read-only control socket serves the same
table and refuses the verbs that change state; telemetry (PUB) carries events
and snapshots. ipc sockets are guarded by file permissions (node/access.py);
tcp endpoints are served with CURVE only, on sockets of their own.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import zmq
import zmq.asyncio

from krex_runtime.node import access
from krex_runtime.node.config import Config
from krex_runtime.service import curve, peers
from krex_runtime.service.host import StartupError
from krex_runtime.service.peers import Credentials
from krex_runtime.wire import endpoints, protocol, verbs
from krex_runtime.wire.protocol import ErrorCode, ProtocolError, Request

log = logging.getLogger("krex.runtime")


@dataclass(frozen=True)
class Peer:
    """Who sent a request: the socket it came on, its routing frames, and on
    ipc the kernel's word on the sending process (None where libzmq has none)."""

    socket: zmq.asyncio.Socket
    route: tuple[bytes, ...]
    read_only: bool
    credentials: Credentials | None = None
    remote: bool = False  # came over tcp, from a client with an authorized CURVE key


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
        # zmq drops larger messages by closing the peer; keep that far above our own
        # limit so an oversized request still gets a `too_large` reply.
        sock.setsockopt(zmq.MAXMSGSIZE, max(self.config.runtime.max_message_bytes * 16, 64 << 20))
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            curve.serve_with(sock, keys)
        return sock

    def _publisher(self, keys: curve.ServerKeys | None = None) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        if keys is not None:
            curve.serve_with(sock, keys)
        return sock

    # --- publishing ----------------------------------------------------------

    def publish(self, topic: bytes, body: Any) -> None:
        frames = [topic, protocol.encode(body)]
        for pub in (self.pub, self.remote_pub):
            if pub is not None:
                pub.send_multipart(frames)

    # --- requests ------------------------------------------------------------

    def serve(self, handlers: dict[str, Handler], refuse_tenants: Refuse) -> list[asyncio.Task[None]]:
        """One task per control socket; each request runs on its own task."""
        missing, unknown = set(verbs.VERBS) - set(handlers), set(handlers) - set(verbs.VERBS)
        assert not missing and not unknown, f"verbs without a handler {missing}, handlers without a verb {unknown}"
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
        while True:
            frames = await sock.recv_multipart(copy=False)
            if len(frames) < 2:
                continue
            credentials = None if remote else peers.ipc_credentials(frames[-1])
            peer = Peer(sock, tuple(f.bytes for f in frames[:-1]), read_only, credentials, remote)
            # Each request runs on its own so a `wait` never blocks the socket.
            asyncio.create_task(self._handle(peer, frames[-1].bytes, handlers, refuse))

    async def _handle(self, peer: Peer, frame: bytes, handlers: dict[str, Handler], refuse: Refuse) -> None:
        req_id = None
        try:
            req = protocol.decode_request(frame, self.config.runtime.max_message_bytes)
            req_id = req.id
            if req.type in verbs.CHANGING:
                if peer.read_only:
                    raise ProtocolError(ErrorCode.REFUSED, f"'{req.type}' is refused on the read-only control socket")
                refuse(peer, req.type)
            body = await handlers[req.type](peer, req)
            self.send(peer, protocol.reply_ok(req_id, body))
        except ProtocolError as exc:
            self.send(peer, protocol.reply_error(req_id or protocol.request_id_of(frame), exc.code, exc.reason))
        except Exception as exc:
            log.exception("request failed")
            self.send(peer, protocol.reply_error(req_id, ErrorCode.INTERNAL, f"internal error: {exc!r}"))

    def send(self, peer: Peer, msg: dict[str, Any]) -> None:
        try:
            peer.socket.send_multipart([*peer.route, protocol.encode(msg)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # a peer that went away must not disturb the service
            log.debug("dropping a message to a departed peer: %s", exc)

    def close(self) -> None:
        if self.authenticator is not None:
            self.authenticator.stop()
        for sock in (self.control, self.control_ro, self.pub, self.remote_control, self.remote_pub):
            if sock is not None:
                sock.close(linger=0)
        self.ctx.term()
        for name in endpoints.SOCKETS:
            (self.run_dir / name).unlink(missing_ok=True)


def _bind_to(sock: zmq.asyncio.Socket, endpoint: str) -> None:
    """Bind, or stop the start-up with one line that names the endpoint (an ipc
    path too long for sun_path, a tcp address in use...)."""
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        raise StartupError(f"cannot serve on {endpoint}: {exc}") from None
