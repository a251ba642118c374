"""Bad control messages get an error reply, and the service keeps serving."""

from __future__ import annotations

import json
import random

import pytest

from krex_runtime.api import Client
from krex_runtime.testing.local_runtime import Runtime
from krex_runtime.wire.protocol import envelope as protocol


def _reply_to_raw(client: Client, frame: bytes) -> dict:
    client.send_raw(frame)
    msg = client.receive(10.0)
    assert msg is not None, f"no reply to {frame[:60]!r}"
    assert msg["type"] == "reply" and msg["v"] == protocol.VERSION
    return msg


def _valid(type_: str, body: object, **override: object) -> bytes:
    msg = protocol.request(type_, body)
    msg.update(override)
    return json.dumps(msg).encode()


# Ids by position: a frame holds a fresh message id and time, and ids must be
# the same in every process that collects the tests (pytest-xdist's workers).
BAD_FRAMES = [
    (b"not json at all", "bad_message"),
    (b"\xff\xfe\x00", "bad_message"),
    (b"[1, 2, 3]", "bad_message"),
    (b'{"v": 1, "type": "status"}', "bad_message"),
    (_valid("status", {}, v=2), "unsupported_version"),
    (_valid("status", {}, v="1"), "unsupported_version"),
    (_valid("launch_missiles", {}), "unknown_type"),
    (_valid("submit", {"argv": "ls"}), "bad_request"),
    (_valid("submit", {"argv": ["ls"], "gpu": "0"}), "bad_request"),
    (_valid("submit", {"argv": ["ls"], "colour": "red"}), "bad_request"),
    (_valid("submit", {"argv": []}), "bad_request"),
    (_valid("submit", {"argv": ["ls"], "gpu": 99}), "bad_request"),
    (_valid("submit", {"argv": ["ls"], "timeout_s": -1}), "bad_request"),
    (_valid("wait", {"id": "no-such-command"}), "not_found"),
    (_valid("cancel", {}), "bad_request"),
    (_valid("pause", {"gpu": 7}), "bad_request"),
    (b"{" * 100_000, "bad_message"),
]


@pytest.mark.parametrize("frame, code", BAD_FRAMES, ids=[f"{i}-{code}" for i, (_, code) in enumerate(BAD_FRAMES)])
def test_bad_message_gets_error_reply(runtime: Runtime, frame: bytes, code: str) -> None:
    with runtime.client() as client:
        reply = _reply_to_raw(client, frame)
        assert reply["ok"] is False
        assert reply["error"]["code"] == code, reply
        assert reply["error"]["reason"]
        assert client.call("hello")["protocol"] == protocol.VERSION


def test_error_reply_names_the_request(runtime: Runtime) -> None:
    with runtime.client() as client:
        frame = _valid("launch_missiles", {})
        reply = _reply_to_raw(client, frame)
        assert reply["re"] == json.loads(frame)["id"]


def test_fuzzing_keeps_the_service_up(runtime: Runtime) -> None:
    rng = random.Random(20261129)
    valid = [_valid(t, b) for t, b in (("status", {}), ("submit", {"argv": ["true"]}), ("hello", {}))]
    with runtime.client() as client:
        for i in range(300):
            base = bytearray(rng.choice(valid))
            for _ in range(rng.randint(1, 6)):
                op = rng.random()
                pos = rng.randrange(len(base))
                if op < 0.4:
                    base[pos] = rng.randrange(256)
                elif op < 0.7:
                    del base[pos : pos + rng.randint(1, 8)]
                else:
                    base[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            client.send_raw(bytes(base))
            reply = client.receive(10.0)
            assert reply is not None, f"no reply to fuzz case {i}: {bytes(base)[:80]!r}"
            assert reply["type"] == "reply"
            if not reply["ok"]:
                assert reply["error"]["code"] in {
                    "bad_message",
                    "unsupported_version",
                    "unknown_type",
                    "bad_request",
                    "not_found",
                }, reply
        assert client.call("status")["pid"] > 0
    assert runtime.krex("run", "--", "echo", "still serving").stdout == "still serving\n"


def test_multiframe_and_empty_messages_are_ignored_safely(runtime: Runtime) -> None:
    import zmq

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(f"ipc://{runtime.run_dir / 'control.sock'}")
    sock.send(b"")
    sock.send_multipart([b"a", b"b", _valid("hello", {})])
    sock.close(linger=100)
    with runtime.client() as client:
        assert client.call("hello")["protocol"] == protocol.VERSION


def test_read_only_socket_refuses_changes(runtime: Runtime) -> None:
    with Client(f"ipc://{runtime.run_dir / 'control-ro.sock'}") as client:
        assert client.call("hello")["read_only"] is True
        assert client.call("status")["gpus"]
        for type_, body in (("submit", {"argv": ["true"]}), ("pause", {}), ("cancel", {"id": "x"})):
            with pytest.raises(Exception) as err:
                client.call(type_, body)
            assert getattr(err.value, "code", None) == "refused"


def test_the_protocol_doc_lists_every_verb_as_the_verb_table_defines_it() -> None:
    """docs/protocol.md's request table names each verb of wire/protocol/verbs.py, with
    'refused' on the read-only socket exactly for the verbs that change state."""
    import re
    from pathlib import Path

    from krex_runtime.wire.protocol import verbs

    doc = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    rows: dict[str, str] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([a-z]+)`", cells[0]) if line.startswith("| `") else []
        for name in names:
            rows[name] = cells[-1]
    documented = {name: rows[name] for name in rows if name in verbs.VERBS}
    assert set(documented) == set(verbs.VERBS)
    for name, verb in verbs.VERBS.items():
        assert documented[name] == ("refused" if verb.changes_state else "yes"), name
