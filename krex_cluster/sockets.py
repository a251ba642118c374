"""The gateway's sockets: its run dir claimed, control (ROUTER) and
telemetry (PUB) bound, ipc ones closed to all but the operators, tcp ones
served with CURVE only (as a runtime's tcp endpoints)."""

from __future__ import annotations

import fcntl
import grp
import os
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from krex_cluster.config import GatewaySection


def claim(run_dir: Path) -> int:
    """One gateway per run dir: a second would take the first one's sockets.
    The lock's descriptor, held for the gateway's life."""
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(run_dir / "gateway.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(f"another gateway serves {run_dir} (gateway.lock is held)") from None
    return fd


def bind(ctx: zmq.asyncio.Context, g: GatewaySection, listen: str, telemetry: str) -> tuple[Any, Any, Any]:
    """(control, pub, the CURVE authenticator or None)."""
    control = ctx.socket(zmq.ROUTER)
    control.setsockopt(zmq.LINGER, 0)
    control.setsockopt(zmq.ROUTER_MANDATORY, 1)
    control.setsockopt(zmq.SNDHWM, 100_000)  # a client busy elsewhere gets its pushes late, not never
    control.setsockopt(zmq.MAXMSGSIZE, max(g.max_message_bytes * 16, 64 << 20))
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 100_000)
    authenticator = _serve_with_curve(ctx, g, [control, pub]) if listen.startswith("tcp://") else None
    for sock, endpoint in ((control, listen), (pub, telemetry)):
        if endpoint.startswith("ipc://"):
            Path(endpoint[len("ipc://"):]).unlink(missing_ok=True)  # a gateway before this one left it
        sock.bind(endpoint)
        if endpoint.startswith("ipc://"):
            _restrict(Path(endpoint[len("ipc://"):]), g.access_group)
    return control, pub, authenticator


def _restrict(path: Path, group: str) -> None:
    """Owner only, or the operators' group (as a runtime's control.sock)."""
    if group:
        os.chown(path, -1, grp.getgrnam(group).gr_gid)
    os.chmod(path, 0o660 if group else 0o600)


def _serve_with_curve(ctx: zmq.asyncio.Context, g: GatewaySection, socks: list[Any]) -> Any:
    import zmq.auth
    from zmq.auth.asyncio import AsyncioAuthenticator

    public, secret = zmq.auth.load_certificate(g.curve_server_key)
    authenticator = AsyncioAuthenticator(ctx)
    authenticator.start()
    authenticator.configure_curve(domain="*", location=g.curve_clients)
    for sock in socks:
        sock.curve_server, sock.curve_secretkey, sock.curve_publickey = True, secret, public
    return authenticator
