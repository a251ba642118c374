"""CURVE for a client's tcp sockets: which key files it names, and giving a
socket its keys. A runtime serves tcp only with CURVE (docs/deployment.md;
the server side is krex_runtime/service/curve.py): a client names its own
NAME.key_secret and the runtime's public NAME.key, given or from the
environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.auth

from krex_runtime.transport.errors import RuntimeUnavailable

CLIENT_KEY_ENV = "KREX_CURVE_CLIENT_KEY"  # this client's NAME.key_secret
SERVER_KEY_ENV = "KREX_CURVE_SERVER_KEY"  # the runtime's NAME.key


@dataclass(frozen=True)
class CurveKeys:
    """The key files a tcp client names: its own NAME.key_secret and the
    runtime's public NAME.key. None: from the environment."""

    client: str | None = None
    server: str | None = None


def use_curve(sock: zmq.Socket[Any], endpoint: str, keys: CurveKeys | None = None) -> None:
    """Give a socket bound for a tcp endpoint this client's CURVE keys (set
    before it connects); ipc needs none."""
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
