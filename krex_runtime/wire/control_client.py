"""A client of the control socket, shared by the `krex` CLI and the console.

It speaks only the protocol (krex_runtime.wire.protocol); it knows nothing of the
runtime's internals.
"""

from __future__ import annotations

import grp
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth

from krex_runtime.wire import protocol
from krex_runtime.wire.endpoints import client_control

PING_AFTER_S = 1.0
DEAD_AFTER_S = 5.0
# A DEALER whose only peer refused it (a CURVE key the runtime does not
# admit) has no pipe left to queue into, and a plain send then waits forever.
SEND_TIMEOUT_S = 5.0
# tcp endpoints are served with CURVE only (docs/deployment.md): a client names
# its own key pair and the runtime's public key.
CLIENT_KEY_ENV = "KREX_CURVE_CLIENT_KEY"  # this client's NAME.key_secret
SERVER_KEY_ENV = "KREX_CURVE_SERVER_KEY"  # the runtime's NAME.key


class RuntimeUnavailable(Exception):
    """No runtime answers at the endpoint."""


class RequestFailed(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class CurveKeys:
    """The key files a tcp client names: its own NAME.key_secret and the
    runtime's public NAME.key. None: from the environment."""

    client: str | None = None
    server: str | None = None


class ControlClient:
    def __init__(self, endpoint: str | None = None, timeout_s: float = 5.0, keys: CurveKeys | None = None) -> None:
        self.endpoint = endpoint or client_control()
        self.timeout_s = timeout_s
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDTIMEO, int(SEND_TIMEOUT_S * 1000))
        try:
            check_reachable(self.endpoint)
            use_curve(self._sock, self.endpoint, keys)
        except RuntimeUnavailable:
            self._sock.close()
            raise
        self.handshake = HandshakeWatch(self._sock, self.endpoint)
        self._sock.connect(self.endpoint)

    def close(self) -> None:
        self.handshake.close()
        self._sock.close(linger=0)

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, type_: str, body: Any = None) -> str:
        msg = protocol.request(type_, body)
        self.send_raw(protocol.encode(msg))
        return msg["id"]

    def send_raw(self, frame: bytes) -> None:
        """Put bytes on the wire as they are (tests of malformed input use it directly)."""
        self.handshake.check()
        try:
            self._sock.send(frame)
        except zmq.Again:
            self.handshake.check()
            raise RuntimeUnavailable(f"cannot send to the krex runtime at {self.endpoint}: no connection") from None

    def receive(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message, or None after `timeout_s`; RuntimeUnavailable as
        soon as the runtime refuses this client's CURVE handshake."""
        if self.handshake.monitor is None:
            if not self._sock.poll(int(timeout_s * 1000)):
                return None
            return protocol.decode_reply(self._sock.recv())
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self.handshake.monitor, zmq.POLLIN)
        deadline = time.monotonic() + timeout_s
        while True:
            ready = dict(poller.poll(max(0, int((deadline - time.monotonic()) * 1000))))
            self.handshake.check()
            if self._sock in ready:
                return protocol.decode_reply(self._sock.recv())
            if time.monotonic() >= deadline:
                return None

    def call(self, type_: str, body: Any = None, timeout_s: float | None = None) -> Any:
        """Send one request and return its reply body; raise on an error reply."""
        req_id = self.send(type_, body)
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.timeout_s)
        while True:
            left = deadline - time.monotonic()
            msg = self.receive(max(0.0, left)) if left > 0 else None
            if msg is None:
                raise RuntimeUnavailable(f"no reply from the krex runtime at {self.endpoint}")
            if msg.get("re") == req_id and msg.get("type") == "reply":
                return _body_of(msg)

    def follow(self, type_: str, body: Any) -> Iterator[dict[str, Any]]:
        """Send a request that attaches to a command and yield what is pushed:
        the reply first, then `output` messages, ending with the `result`.
        Pings the runtime when it is quiet, so a dead runtime is noticed."""
        req_id = self.send(type_, body)
        ping_id: str | None = None
        ping_sent = 0.0
        while True:
            msg = self.receive(PING_AFTER_S)
            now = time.monotonic()
            if msg is None:
                if ping_id is None:
                    ping_id, ping_sent = self.send("hello", {"client": "krex-follow"}), now
                elif now - ping_sent > DEAD_AFTER_S:
                    raise RuntimeUnavailable(f"the krex runtime at {self.endpoint} stopped answering")
                continue
            if msg.get("re") == ping_id:
                ping_id = None
                continue
            if msg.get("re") != req_id:
                continue
            if msg["type"] == "reply":
                yield {"type": "reply", "body": _body_of(msg)}
            else:  # decode_reply checked a push's envelope: its body is an object
                yield {"type": msg["type"], "body": msg.get("body")}
                if msg["type"] == protocol.PUSH_RESULT:
                    return


class HandshakeWatch:
    """Watches a tcp socket's CURVE handshakes (a zmq socket monitor), so a
    client the runtime refuses hears why at once instead of waiting for a
    reply that never comes. Nothing to watch on ipc (no handshake)."""

    EVENTS = (
        zmq.EVENT_HANDSHAKE_SUCCEEDED
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    )

    def __init__(self, sock: zmq.Socket, endpoint: str) -> None:
        self.endpoint = endpoint
        self._sock = sock
        self.monitor: zmq.Socket | None = None
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


def check_reachable(endpoint: str) -> None:
    """An ipc endpoint this user cannot use fails here, with the reason, rather
    than as a runtime that never answers."""
    if not endpoint.startswith("ipc://"):
        return
    path = Path(endpoint[len("ipc://") :])
    try:
        gid = path.stat().st_gid
    except FileNotFoundError:
        raise RuntimeUnavailable(f"no krex runtime at {endpoint}") from None
    except PermissionError:
        raise RuntimeUnavailable(f"permission denied on {endpoint}: its folder is closed to you") from None
    if not os.access(path, os.R_OK | os.W_OK):
        try:
            group = f" (group {grp.getgrgid(gid).gr_name})"
        except KeyError:
            group = ""
        raise RuntimeUnavailable(f"permission denied on {endpoint}: only its owner and group{group} may use it")


def use_curve(sock: zmq.Socket, endpoint: str, keys: CurveKeys | None = None) -> None:
    """Give a socket bound for a tcp endpoint this client's CURVE keys."""
    if not endpoint.startswith("tcp://"):
        return
    keys = keys or CurveKeys()
    client_file = keys.client or os.environ.get(CLIENT_KEY_ENV, "")
    server_file = keys.server or os.environ.get(SERVER_KEY_ENV, "")
    if not client_file or not server_file:
        raise RuntimeUnavailable(
            f"{endpoint} is served with CURVE only: set {CLIENT_KEY_ENV} (your NAME.key_secret) "
            f"and {SERVER_KEY_ENV} (the runtime's public NAME.key)"
        )
    try:
        public, secret = zmq.auth.load_certificate(client_file)
        server_public, _ = zmq.auth.load_certificate(server_file)
    except (OSError, ValueError) as exc:
        raise RuntimeUnavailable(f"cannot load CURVE keys: {exc}") from None
    if secret is None:
        raise RuntimeUnavailable(f"{CLIENT_KEY_ENV}={client_file} holds no secret key (give the NAME.key_secret file)")
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


def _body_of(msg: dict[str, Any]) -> Any:
    """A reply's body, or RequestFailed; decode_reply checked `ok` and `error`."""
    if msg["ok"]:
        return msg.get("body", {})
    raise RequestFailed(msg["error"]["code"], msg["error"]["reason"])


def how_to_start() -> str:
    """A command that starts a runtime here as written. Root must say in a
    config file who tenants run as (docs/configuration.md, [tenants])."""
    run_dir = os.environ.get("KREX_RUN_DIR")
    where = f" --run-dir {run_dir}" if run_dir else ""
    if os.geteuid() == 0:
        return (
            f"start one with `krex-runtime --config FILE{where}` (add `--sim 2` without GPUs), FILE the output of "
            f"`krex config default` with [tenants] user = \"NAME\" (or allow_root = true)"
        )
    return f"start one with `krex-runtime{where}` (this node's GPUs) or `krex-runtime --sim 2{where}` (simulated GPUs)"
