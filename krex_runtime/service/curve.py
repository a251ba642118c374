"""ZeroMQ CURVE for the runtime's tcp endpoints: its key pair, the clients it
admits, and making key pairs (`krex keys create`).

A tcp endpoint is served only with CURVE: the runtime proves itself with its
secret key, and a ZAP handler admits a client only when its public key is one
of the `*.key` files in `runtime.curve_clients` (read at start). Key files are
ZeroMQ certificates as `zmq.auth.create_certificates` writes them: NAME.key
holds the public key, NAME.key_secret both keys. The client side is in
krex_runtime/wire/control_client.py.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
import zmq.utils.z85
from zmq.auth.asyncio import AsyncioAuthenticator

from krex_runtime.node.config import RuntimeSection


class CurveError(Exception):
    """Keys that cannot serve; the message is one line for the operator."""


@dataclass(frozen=True)
class ServerKeys:
    public: bytes
    secret: bytes
    clients: Path  # folder of authorized client public keys


def server_keys(runtime: RuntimeSection) -> ServerKeys | None:
    """The runtime's keys when it serves tcp (None when it does not)."""
    endpoints = [key for key in ("control_tcp", "telemetry_tcp") if getattr(runtime, key)]
    if not endpoints:
        return None
    if not runtime.curve_server_key or not runtime.curve_clients:
        raise CurveError(
            f"runtime.{endpoints[0]} is served only with CURVE: set runtime.curve_server_key (the runtime's "
            "secret key file) and runtime.curve_clients (a folder of authorized client public keys); "
            "`krex keys create DIR` makes key pairs"
        )
    path = Path(runtime.curve_server_key)
    public, secret = _load(path, "runtime.curve_server_key")
    if secret is None:
        raise CurveError(f"runtime.curve_server_key {path} holds no secret key (give the NAME.key_secret file)")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise CurveError(f"runtime.curve_server_key {path} is open to other users (mode {mode:04o}): chmod 600 it")
    clients = Path(runtime.curve_clients)
    if not clients.is_dir():
        raise CurveError(f"runtime.curve_clients {clients} is not a folder")
    if not any(_load(key, "runtime.curve_clients")[0] for key in clients.glob("*.key")):
        raise CurveError(f"runtime.curve_clients {clients} holds no client public key (*.key files)")
    return ServerKeys(public, secret, clients)


def _load(path: Path, key: str) -> tuple[bytes, bytes | None]:
    try:
        return zmq.auth.load_certificate(path)
    except OSError:
        raise CurveError(f"{key}: cannot read {path}") from None
    except ValueError:
        raise CurveError(f"{key}: {path} is not a ZeroMQ key file") from None


class _NamingAuthenticator(AsyncioAuthenticator):
    """Names each client it admits after its key file (NAME.key: NAME), the
    "User-Id" of its messages: who submits, for fair share."""

    def __init__(self, ctx: zmq.Context[Any], names: dict[bytes, str]) -> None:
        super().__init__(ctx)
        self._names = names

    def curve_user_id(self, client_public_key: bytes) -> str:
        key = zmq.utils.z85.encode(client_public_key)
        return self._names.get(key, key.decode())


def client_names(folder: Path) -> dict[bytes, str]:
    """Each authorized public key (z85) -> the name of its key file."""
    names: dict[bytes, str] = {}
    for path in sorted(folder.glob("*.key")):
        try:
            names.setdefault(zmq.auth.load_certificate(path)[0], path.stem)
        except (OSError, ValueError):
            continue
    return names


def start_authenticator(ctx: zmq.Context[Any], keys: ServerKeys) -> AsyncioAuthenticator:
    """The ZAP handler admitting the authorized clients (needs a running event loop)."""
    auth = _NamingAuthenticator(ctx, client_names(keys.clients))
    auth.start()
    auth.configure_curve(domain="*", location=str(keys.clients))
    return auth


def serve_with(sock: zmq.Socket[Any], keys: ServerKeys) -> None:
    """Make `sock` a CURVE server; set before it binds."""
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_server = True


def create_key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """NAME.key (public, to hand out) and NAME.key_secret (owner only) in `folder`."""
    for path in (folder / f"{name}.key", folder / f"{name}.key_secret"):
        if path.exists():
            raise CurveError(f"{path} exists; not overwriting a key")
    old = os.umask(0o077)  # the secret file is never readable by others, not even for a moment
    try:
        folder.mkdir(parents=True, exist_ok=True)
        public, secret = zmq.auth.create_certificates(folder, name)
    finally:
        os.umask(old)
    os.chmod(public, 0o644)
    return Path(public), Path(secret)
