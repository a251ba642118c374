"""The transport on its own: what it says of an endpoint it cannot use, the
watch on a quiet runtime, and the reconnect loop, without a runtime."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from krex_runtime.transport import Connection, RuntimeUnavailable, Subscription
from krex_runtime.transport.keys import CLIENT_KEY_ENV, SERVER_KEY_ENV
from krex_runtime.transport.liveness import DEAD_AFTER_S, PING_AFTER_S, Liveness
from krex_runtime.transport.reconnect import keep_connected


def test_a_missing_ipc_socket_is_said_at_once(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path / 'control.sock'}"
    with pytest.raises(RuntimeUnavailable, match=f"no krex runtime at {endpoint}"):
        Connection(endpoint)
    with pytest.raises(RuntimeUnavailable, match="no krex runtime"):
        Subscription(f"ipc://{tmp_path / 'telemetry.sock'}", [b""])


@pytest.mark.skipif(os.geteuid() == 0, reason="root may use any socket")
def test_an_ipc_socket_closed_to_this_user_says_so(tmp_path: Path) -> None:
    path = tmp_path / "control.sock"
    path.touch(mode=0o600)
    path.chmod(0o000)
    with pytest.raises(RuntimeUnavailable, match="permission denied"):
        Connection(f"ipc://{path}")


def test_a_tcp_endpoint_without_keys_names_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLIENT_KEY_ENV, raising=False)
    monkeypatch.delenv(SERVER_KEY_ENV, raising=False)
    with pytest.raises(RuntimeUnavailable, match=CLIENT_KEY_ENV):
        Connection("tcp://127.0.0.1:1")


def test_a_runtime_not_started_yet_may_be_waited_for(tmp_path: Path) -> None:
    """Without the access check (a cluster agent starting its runtime) the
    connection opens and a receive waits, empty, for the runtime to come."""

    async def connect() -> bytes | None:
        connection = Connection(f"ipc://{tmp_path / 'control.sock'}", check_access=False)
        try:
            return await connection.receive(0.05)
        finally:
            connection.close()

    assert asyncio.run(connect()) is None


def test_a_quiet_runtime_is_pinged_then_given_up() -> None:
    alive = Liveness(now=0.0)
    assert not alive.quiet(PING_AFTER_S / 2)
    assert alive.quiet(PING_AFTER_S)
    alive.ping_id, alive.ping_sent = "p1", PING_AFTER_S
    assert not alive.quiet(PING_AFTER_S * 2)  # one ping out at a time
    assert not alive.dead(PING_AFTER_S + DEAD_AFTER_S / 2)
    assert alive.dead(PING_AFTER_S + DEAD_AFTER_S + 0.1)


def test_an_answered_ping_keeps_it_alive_and_another_instance_ends_it() -> None:
    alive = Liveness(now=0.0)
    alive.ping_id, alive.ping_sent = "p1", 1.0
    assert alive.heard({"re": "p1", "body": {"instance": "a"}}, 1.5)
    assert alive.ping_id is None and not alive.dead(100.0)
    alive.ping_id = "p2"
    assert alive.heard({"re": "p2", "body": {"instance": "b"}}, 2.0)
    assert alive.dead(2.0)  # a restarted gateway has none of this client's attachments


def test_a_lost_session_is_said_and_opened_again() -> None:
    lost: list[str] = []
    sessions = 0

    async def session() -> None:
        nonlocal sessions
        sessions += 1
        if sessions < 3:
            raise RuntimeUnavailable(f"gone {sessions}")
        raise asyncio.CancelledError  # the caller stops it

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(keep_connected(session, lambda exc: lost.append(str(exc)), every_s=0))
    assert lost == ["gone 1", "gone 2"] and sessions == 3


def test_what_is_not_the_transports_failure_ends_the_loop() -> None:
    async def session() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        asyncio.run(keep_connected(session, lambda exc: None, every_s=0))
