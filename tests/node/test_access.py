"""Access to the runtime's control plane, proven with real accounts and sockets:
who may open which socket, tcp only with CURVE, and what a start refuses
(tenants: test_tenant_access.py)."""

from __future__ import annotations

import asyncio
import errno
import grp
import json
import os
import shutil
import socket
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq
from real_accounts import Accounts, as_user, mode_of
from runtime_helpers import start_refused

from krex_console.feed import FeedStatus, LiveFeed
from krex_runtime.api import AsyncClient, Client, RequestFailed, RuntimeUnavailable
from krex_runtime.node import access
from krex_runtime.node.config import Config, RuntimeSection
from krex_runtime.testing.local_runtime import Runtime, command
from krex_runtime.transport.keys import CLIENT_KEY_ENV, SERVER_KEY_ENV, use_curve
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol

KREX = command("krex")



def connect(path: Path) -> Callable[[], str]:
    """A raw connect to a Unix socket: "connected" or the errno name."""

    def attempt() -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(path))
            except OSError as exc:
                return errno.errorcode[exc.errno]
        return "connected"

    return attempt


def call(endpoint: str, type_: str, body: dict[str, Any] | None = None) -> Callable[[], str]:
    """A request through the real client: "ok", the error code, or why there was no reply."""

    def attempt() -> str:
        try:
            with Client(endpoint, timeout=10) as client:
                client.call(type_, body)
        except RequestFailed as exc:
            return exc.code
        except RuntimeUnavailable as exc:
            return f"unavailable: {exc}"
        return "ok"

    return attempt


# --- 1. socket ownership and groups ------------------------------------------------------


def test_run_dir_modes_for_each_kind_of_access() -> None:
    def mode(runtime: dict[str, str], apart: bool = False) -> int:
        config = Config(runtime=RuntimeSection(**runtime))
        return access.run_dir_access(config, apart).mode

    root_group = grp.getgrgid(0).gr_name
    assert mode({}) == 0o700
    assert mode({"access_group": root_group}) == 0o2750
    assert mode({"read_only_group": root_group}) == 0o2750
    assert mode({"access_group": root_group, "read_only_group": "*"}) == 0o2751
    assert mode({}, apart=True) == 0o701
    with pytest.raises(access.AccessError, match="unknown group 'no-such-group-krex'"):
        mode({"access_group": "no-such-group-krex"})


def test_operators_group_and_world_readable_read_only_socket(accounts: Accounts, open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, runtime_extra=f'access_group = "{accounts.operators}"\nread_only_group = "*"')
    ops_gid = grp.getgrnam(accounts.operators).gr_gid
    assert mode_of(rt.run_dir) == (0o2751, 0, ops_gid)
    assert mode_of(rt.run_dir / endpoints.CONTROL_SOCKET) == (0o660, 0, ops_gid)
    assert mode_of(rt.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET)[:2] == (0o666, 0)
    assert mode_of(rt.run_dir / endpoints.TELEMETRY_SOCKET)[:2] == (0o666, 0)
    assert stat.S_IMODE(os.stat(rt.trace_path).st_mode) & 0o007 == 0
    control = endpoints.control(rt.run_dir)
    read_only = endpoints.control_read_only(rt.run_dir)

    assert as_user(accounts.operator, connect(rt.run_dir / endpoints.CONTROL_SOCKET)) == "connected"
    assert as_user(accounts.operator, call(control, "pause")) == "ok"
    assert as_user(accounts.operator, call(control, "resume")) == "ok"

    assert as_user(accounts.stranger, connect(rt.run_dir / endpoints.CONTROL_SOCKET)) == "EACCES"
    assert "permission denied" in as_user(accounts.stranger, call(control, "hello"))
    assert as_user(accounts.stranger, call(read_only, "status")) == "ok"
    assert as_user(accounts.stranger, call(read_only, "pause")) == protocol.ErrorCode.REFUSED
    # `ls` is anyone's who may read; `logs` only its submitter's and operators' (as streaming is).
    theirs = json.loads(rt.krex("run", "--json", "--", "echo", "private").stdout)["id"]
    assert as_user(accounts.stranger, call(read_only, "ls")) == "ok"
    assert as_user(accounts.stranger, call(read_only, "logs", {"id": theirs})) == protocol.ErrorCode.FORBIDDEN
    assert as_user(accounts.operator, call(control, "logs", {"id": theirs})) == "ok"
    with rt.client() as c:
        assert c.call("status")["paused"] is False


def test_read_only_group_and_an_owner_only_control_socket(accounts: Accounts, open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, runtime_extra=f'read_only_group = "{accounts.watchers}"')
    watchers = grp.getgrnam(accounts.watchers).gr_gid
    assert mode_of(rt.run_dir) == (0o2750, 0, watchers)
    assert mode_of(rt.run_dir / endpoints.CONTROL_SOCKET)[:2] == (0o600, 0)
    assert mode_of(rt.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET) == (0o660, 0, watchers)
    assert mode_of(rt.run_dir / endpoints.TELEMETRY_SOCKET) == (0o660, 0, watchers)

    assert as_user(accounts.watcher, call(endpoints.control_read_only(rt.run_dir), "status")) == "ok"
    assert as_user(accounts.watcher, connect(rt.run_dir / endpoints.TELEMETRY_SOCKET)) == "connected"
    assert as_user(accounts.watcher, connect(rt.run_dir / endpoints.CONTROL_SOCKET)) == "EACCES"
    for account in (accounts.stranger, accounts.operator):
        assert as_user(account, connect(rt.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET)) == "EACCES"
    closed = as_user(accounts.stranger, call(endpoints.control_read_only(rt.run_dir), "status"))
    assert closed.endswith("control-ro.sock: its folder is closed to you")


# --- 2. tcp only with CURVE ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_keys(folder: Path, name: str) -> tuple[Path, Path]:
    done = subprocess.run([*KREX, "keys", "create", str(folder), "--name", name], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder / f"{name}.key", folder / f"{name}.key_secret"


def test_tcp_admits_only_authorized_curve_keys(make_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "keys"
    server_public, server_secret = make_keys(keys, "server")
    agent_public, agent_secret = make_keys(keys, "agent")
    _, intruder_secret = make_keys(keys, "intruder")
    assert stat.S_IMODE(server_secret.stat().st_mode) == 0o600
    clients = tmp_path / "clients"
    clients.mkdir()
    shutil.copy(agent_public, clients)
    control, telemetry = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    rt = make_runtime(runtime_extra=(
        f'control_tcp = "{control}"\ntelemetry_tcp = "{telemetry}"\n'
        f'curve_server_key = "{server_secret}"\ncurve_clients = "{clients}"'
    ))
    monkeypatch.setenv(SERVER_KEY_ENV, str(server_public))

    monkeypatch.setenv(CLIENT_KEY_ENV, str(agent_secret))
    with Client(control, timeout=10) as client:
        assert client.call("hello")["read_only"] is False
        client.call("pause")
        assert client.call("status")["paused"] is True
        client.call("resume")
    sub = zmq.Context.instance().socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, protocol.TOPIC_SNAPSHOT)
        use_curve(sub, telemetry)
        sub.connect(telemetry)
        assert sub.poll(10_000), "no snapshot over CURVE telemetry"
        assert sub.recv_multipart()[0] == protocol.TOPIC_SNAPSHOT
    finally:
        sub.close(linger=0)

    assert asyncio.run(console_feed_status(control, telemetry)) == FeedStatus.LIVE

    monkeypatch.setenv(CLIENT_KEY_ENV, str(intruder_secret))
    with Client(control) as client, pytest.raises(RuntimeUnavailable, match="refused this client's CURVE key"):
        client.send("hello")  # told here already where the handshake has failed by then,
        client.receive(30.0)  # else not answered, and told why at once
    # The API clients too: they used to wait forever in a send with no connection left.
    refused = "refused this client's CURVE key"
    with pytest.raises(RuntimeUnavailable, match=refused), Client(control, timeout=30) as api:
        api.status()
    with pytest.raises(RuntimeUnavailable, match=refused), Client(control, timeout=30) as api:
        api.submit(["true"]).wait(timeout=60)
    assert asyncio.run(async_status(control)) == refused
    wrong_server = {"curve_client_key": agent_secret, "curve_server_key": agent_public}
    with pytest.raises(RuntimeUnavailable, match=r"handshake .* failed"), Client(control, timeout=30, **wrong_server) as api:
        api.status()
    plain = zmq.Context.instance().socket(zmq.DEALER)
    try:
        plain.connect(control)
        plain.send(protocol.encode(protocol.request("hello")))
        assert not plain.poll(2000), "a client without CURVE was answered"
    finally:
        plain.close(linger=0)
    monkeypatch.delenv(CLIENT_KEY_ENV)
    with pytest.raises(RuntimeUnavailable, match=CLIENT_KEY_ENV):
        Client(control)
    done = rt.krex("--curve-client-key", str(agent_secret), "--endpoint", control, "status", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["paused"] is False


async def async_status(control: str) -> str:
    """What AsyncClient.status raises on this endpoint, from its message."""
    async with AsyncClient(control, timeout=30) as api:
        try:
            await api.status()
        except RuntimeUnavailable as exc:
            return "refused this client's CURVE key" if "refused this client's CURVE key" in str(exc) else str(exc)
    return "answered"


async def console_feed_status(control: str, telemetry: str) -> str:
    """The console's live feed on tcp endpoints: its status once it holds the node's state."""
    feed = LiveFeed(control, telemetry, lambda message: None)
    task = asyncio.create_task(feed.run())
    try:
        for _ in range(400):
            if feed.status == FeedStatus.LIVE and feed.state.gpus:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    return feed.status


def test_start_up_refusals(tmp_path: Path) -> None:
    tcp = f'control_tcp = "tcp://127.0.0.1:{free_port()}"'
    line = start_refused(Runtime(tmp_path / "tcp", sim=1, runtime_extra=tcp))
    assert line.startswith("krex-runtime: runtime.control_tcp is served only with CURVE: set runtime.curve_server_key")

    keys = tmp_path / "keys"
    _, secret = make_keys(keys, "server")
    secret.chmod(0o644)
    curve = f'{tcp}\ncurve_server_key = "{secret}"\ncurve_clients = "{keys}"'
    line = start_refused(Runtime(tmp_path / "open-key", sim=1, runtime_extra=curve))
    assert line == f"krex-runtime: runtime.curve_server_key {secret} is open to other users (mode 0644): chmod 600 it"

    line = start_refused(Runtime(tmp_path / "nobody-known", sim=1, tenant_user="no-such-user-krex"))
    assert line == "krex-runtime: tenants.user names an unknown user 'no-such-user-krex'"


def test_a_tenant_user_among_the_operators_is_refused(accounts: Accounts, tmp_path: Path) -> None:
    rt = Runtime(tmp_path / "rt", sim=1, tenant_user=accounts.operator.name,
                 runtime_extra=f'access_group = "{accounts.operators}"')
    assert start_refused(rt) == (
        f"krex-runtime: tenants.user {accounts.operator.name!r} is a member of runtime.access_group "
        f"{accounts.operators!r}: its commands could reach the control socket"
    )
