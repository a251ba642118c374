"""The gateway's own sockets without Ray nodes: tcp served with CURVE only
(an authorized key is an operator), ipc closed to other users, one gateway
per run dir. Ray is imported, never joined: no node is ever asked."""

from __future__ import annotations

import asyncio
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the gateway needs the `cluster` extra (ray)")

from krex_cluster.config import ClusterConfig, GatewaySection, validate
from krex_cluster.gateway import Gateway
from krex_runtime.api import Client, RequestFailed, RuntimeUnavailable
from krex_runtime.service.curve import create_key_pair


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serving(gateway: Gateway, probe: Any) -> Any:
    """Run `probe()` in a thread while the gateway answers requests."""

    async def main() -> Any:
        gateway.bind()
        task = asyncio.ensure_future(gateway._serve())
        try:
            return await asyncio.to_thread(probe)
        finally:
            task.cancel()
            await gateway.stop()

    return asyncio.run(main())


def test_tcp_is_served_with_curve_only(tmp_path: Path) -> None:
    keys, clients = tmp_path / "keys", tmp_path / "clients"
    keys.mkdir()
    clients.mkdir()
    _, server_secret = create_key_pair(keys, "gateway")
    client_public, client_secret = create_key_pair(keys, "operator")
    _, stranger_secret = create_key_pair(keys, "stranger")
    (clients / "operator.key").write_bytes(client_public.read_bytes())
    port, telemetry_port = free_port(), free_port()
    config = validate(ClusterConfig(gateway=GatewaySection(
        listen=f"tcp://127.0.0.1:{port}", telemetry=f"tcp://127.0.0.1:{telemetry_port}", run_dir=str(tmp_path / "gw"),
        curve_server_key=str(server_secret), curve_clients=str(clients))))

    def probe() -> tuple[Any, str, str]:
        endpoint = f"tcp://127.0.0.1:{port}"
        with Client(endpoint, curve_client_key=client_secret, curve_server_key=keys / "gateway.key", timeout=5) as c:
            hello = c.call("hello")
            with pytest.raises(RequestFailed) as err:  # an operator: not forbidden, but no node can take it
                c.call("pause", {"node": "n1"})
            refused = err.value.code
        # Refused at the handshake: the client says so at once (transport/handshake.py).
        stranger = Client(endpoint, timeout=2, curve_client_key=stranger_secret, curve_server_key=keys / "gateway.key")
        try:
            with pytest.raises(RuntimeUnavailable) as unknown:
                stranger.call("hello")
        finally:
            stranger.close()
        return hello, refused, str(unknown.value)

    hello, refused, unknown = serving(Gateway(config), probe)
    assert hello["cluster"] and hello["telemetry"] == f"tcp://127.0.0.1:{telemetry_port}"
    assert refused == "not_found"
    assert "refused this client's CURVE key" in unknown


def test_ipc_is_the_owners_and_a_second_gateway_is_refused(tmp_path: Path) -> None:
    config = validate(ClusterConfig(gateway=GatewaySection(run_dir=str(tmp_path / "gw"))))
    first = Gateway(config)

    def probe() -> tuple[int, str]:
        with pytest.raises(RuntimeError) as err:
            Gateway(config).bind()
        return stat.S_IMODE((tmp_path / "gw" / "control.sock").stat().st_mode), str(err.value)

    mode, second = serving(first, probe)
    assert mode == 0o600
    assert "another gateway serves" in second


def test_a_client_with_too_many_requests_being_answered_is_told_busy(tmp_path: Path) -> None:
    """A `wait` for a command no node has taken yet stays unanswered; past
    max_requests_per_peer of them, the next request is refused at once."""
    from krex_cluster.config import NodeSpec

    config = validate(ClusterConfig(gateway=GatewaySection(run_dir=str(tmp_path / "gw"), max_requests_per_peer=3),
                                    nodes={"n1": NodeSpec()}))
    gateway = Gateway(config)

    def probe() -> list[str]:
        conn = Client(gateway.listen, timeout=5)
        try:
            cid = conn.call("submit", {"argv": ["true"]})["id"]  # held: its node was never seen
            for _ in range(3):
                conn.send("wait", {"id": cid, "attach": False})
            codes = []
            for verb in ("hello", "status"):
                with pytest.raises(RequestFailed) as err:
                    conn.call(verb)
                codes.append(err.value.code)
            return codes
        finally:
            conn.close()

    assert serving(gateway, probe) == ["busy", "busy"]


def test_what_an_earlier_gateway_held_is_held_again_and_a_bad_file_is_moved_aside(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A gateway starting on a run dir holds again the commands of its
    held-commands file (status, wait and cancel find them by their ids);
    a malformed file is said, moved aside, and nothing is held from it."""
    import logging

    from krex_cluster import held
    from krex_cluster.config import NodeSpec

    run_dir = tmp_path / "gw"
    run_dir.mkdir()
    path = run_dir / held.FILE_NAME
    entry = {"id": "cold-1", "body": {"argv": ["true"], "label": "kept", "node_labels": {"host": "n1"}},
             "retries_left": 1, "attempts": 1, "submitted_at": 5.0}
    held.write(path, [entry])
    config = validate(ClusterConfig(gateway=GatewaySection(run_dir=str(run_dir), max_held=1),
                                    nodes={"n1": NodeSpec()}))
    gateway = Gateway(config)

    def probe() -> tuple[Any, Any, Any]:
        with Client(gateway.listen, timeout=5) as c:
            rows = c.call("status")["commands"]
            with pytest.raises(RequestFailed) as full:  # n1 never seen: it would be held, past max_held
                c.call("submit", {"argv": ["true"]})
            assert full.value.code == "queue_full" and "gateway.max_held" in full.value.reason
            cancelled = c.call("cancel", {"id": "cold-1"})
            waited = c.call("wait", {"id": "cold-1", "attach": False})
        return rows, cancelled, waited

    rows, cancelled, waited = serving(gateway, probe)
    assert [(r["id"], r["label"], r["state"], r["node"], r["attempts"]) for r in rows] == [
        ("cold-1", "kept", "queued", None, 1)]
    assert cancelled["state"] == "cancelled" and waited["state"] == "cancelled"
    assert held.read(path) == []  # cancelled: no longer held, on disk too

    path.write_text('{"format": "krex-cluster held commands", "version": 1, "commands": [{"id": ')  # torn
    with caplog.at_level(logging.ERROR, logger="krex.cluster"):
        again = Gateway(config)
        rows = serving(again, lambda: Client(again.listen, timeout=5).status().record["commands"])
    assert rows == []
    assert f"held commands file {path} is not JSON" in caplog.text and (run_dir / "held.json.bad").exists()
