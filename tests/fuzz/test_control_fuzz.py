"""Fuzzing the control sockets of one real runtime (policy krex, simulated GPUs).

Every message gets exactly one well-formed reply envelope: `ok`, or `error`
with a code and a reason (the same code the pure decoder predicts for it).
Garbage changes nothing: no command is submitted, nothing is paused or
leased. The only requests that change anything are deliberate: valid
`submit` bodies whose command is `true`, each waited for to its end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from fuzz_helpers import JUNK, TEXT, budget, mangled_fields, mutated, valid_fields
from hypothesis import assume, event, example, given
from hypothesis import strategies as st
from runtime_helpers import stop_and_check

from krex_runtime.service import handlers
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol import verbs
from krex_runtime.wire.protocol.envelope import FINAL_STATES, REQUESTS, ErrorCode, ProtocolError, Request
from krex_runtime.wire.trace.jsonl import read_trace

MAX_BYTES = 1 << 20  # runtime.max_message_bytes, the default
CODES = {v for k, v in vars(ErrorCode).items() if not k.startswith("_")}
CHANGING = {"submit", "cancel", "pause", "resume", "lease", "release", "recycle"}
REPLY_TIMEOUT_MS = 20_000


class Wire:
    """A DEALER on one control socket that sends frames as they are and collects
    what comes back before the reply to a sentinel `hello` sent right after."""

    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.pushes: list[dict[str, Any]] = []

    def close(self) -> None:
        self.sock.close(linger=0)

    def exchange(self, frames: list[bytes]) -> list[list[bytes]]:
        self.sock.send_multipart(frames)
        sentinel = protocol.request("hello", {"client": "fuzz-sentinel"})
        self.sock.send(protocol.encode(sentinel))
        received = []
        while True:
            assert self.sock.poll(REPLY_TIMEOUT_MS), f"no reply to the sentinel after {frames[-1][:80]!r}"
            msg = self.sock.recv_multipart()
            if _envelope(msg[-1]).get("re") == sentinel["id"]:
                return received
            received.append(msg)

    def reply_to(self, frames: list[bytes]) -> dict[str, Any]:
        """The one reply to `frames` (pushes to earlier attached requests are kept aside)."""
        replies = []
        for msg in self.exchange(frames):
            envelope = _envelope(msg[-1])
            if envelope["type"] == "reply":
                assert msg[:-1] == frames[:-1], f"reply routed with {msg[:-1]!r}, sent {frames[:-1]!r}"
                replies.append(envelope)
            else:
                self.pushes.append(envelope)
        assert len(replies) == 1, f"{len(replies)} replies to {frames[-1][:80]!r}: {replies}"
        return replies[0]


def _envelope(frame: bytes) -> dict[str, Any]:
    msg = json.loads(frame)
    assert msg["v"] == protocol.VERSION and isinstance(msg["type"], str) and isinstance(msg["id"], str), msg
    if msg["type"] == "reply":
        assert isinstance(msg["ok"], bool), msg
        if not msg["ok"]:
            assert msg["error"]["code"] in CODES and msg["error"]["reason"], msg
    return msg


def predicted(frame: bytes) -> Request | ProtocolError:
    """What the runtime's own decoder makes of a frame (the oracle for its reply)."""
    try:
        return protocol.decode_request(frame, MAX_BYTES)
    except ProtocolError as exc:
        return exc


def check_reply(reply: dict[str, Any], frame: bytes) -> None:
    expected = predicted(frame)
    assert reply["re"] == (expected.id if isinstance(expected, Request) else protocol.request_id_of(frame))
    if isinstance(expected, ProtocolError):
        assert not reply["ok"] and reply["error"]["code"] == expected.code, (reply, expected)
    else:
        assert reply["ok"] or reply["error"]["code"] != ErrorCode.INTERNAL, reply


@pytest.fixture(scope="module")
def submitted() -> list[str]:
    """The ids of the commands the fuzzer submitted on purpose."""
    return []


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path, submitted: list[str]) -> Iterator[Runtime]:
    runtime = Runtime(tmp_path_factory.mktemp("control-fuzz"), policy="krex", sim=2, slots=2).start()
    yield runtime
    stop_and_check(runtime)
    events = read_trace(runtime.trace_path).events
    queued = [e["id"] for e in events if e["type"] == "command_queued"]
    assert queued == submitted, "a command was queued that the fuzzer did not submit on purpose"
    assert not [e for e in events if e["type"] in ("admission_paused", "admission_resumed")]


@pytest.fixture(scope="module")
def control(rt: Runtime) -> Iterator[Wire]:
    wire = Wire(f"ipc://{rt.run_dir / 'control.sock'}")
    yield wire
    wire.close()


@pytest.fixture(scope="module")
def read_only(rt: Runtime) -> Iterator[Wire]:
    wire = Wire(f"ipc://{rt.run_dir / 'control-ro.sock'}")
    yield wire
    wire.close()


def untouched_problems(rt: Runtime) -> list[str]:
    """What is paused, leased, queued, running or held; [] when nothing is."""
    with rt.client() as c:
        status = c.call("status")
    problems = [k for k in ("paused", "stopping") if status[k]] + (["queued"] if status["queued"] else [])
    for gpu in status["gpus"]:
        problems += [f"GPU {gpu['index']} {k}: {gpu[k]}" for k in ("paused", "leased", "running", "frozen") if gpu[k]]
        if gpu["region_holder"] is not None or gpu["region_queue"]:
            problems.append(f"GPU {gpu['index']} region held by {gpu['region_holder']}, {gpu['region_queue']} queued")
    return problems


def check_untouched(rt: Runtime) -> None:
    """Nothing paused, leased, queued or running once the last deliberate command
    has let go of its GPU (a lease ends just after its command's result)."""
    try:
        wait_until(lambda: not untouched_problems(rt), 10, "the runtime to hold nothing")
    except AssertionError:
        raise AssertionError(f"the runtime still holds: {untouched_problems(rt)}") from None


def frame_of(type_: str, body: Any, **envelope: Any) -> bytes:
    msg = protocol.request(type_, {})
    msg["body"] = body
    msg.update(envelope)
    return json.dumps(msg).encode()


SAMPLES = [frame_of(t, {}) for t in sorted(REQUESTS)] + [frame_of("submit", {"argv": ["true"]})]


def garbage_frames() -> st.SearchStrategy[bytes]:
    """Frames that must not change anything: anything, as long as the runtime's own
    decoder refuses it or reads a request that only looks."""
    return st.one_of(
        st.binary(max_size=300),
        JUNK.map(lambda v: json.dumps(v).encode()),
        st.tuples(st.sampled_from(sorted(REQUESTS)), JUNK).map(lambda tb: frame_of(*tb)),
        st.tuples(st.sampled_from(sorted(REQUESTS)), st.sampled_from(sorted(REQUESTS)).flatmap(
            lambda t: mangled_fields(REQUESTS[t]))).map(lambda tb: frame_of(*tb)),
        st.sampled_from(SAMPLES).flatmap(mutated),
        st.builds(lambda v, t, i: frame_of(t, {}, v=v, id=i), JUNK, TEXT, JUNK),
    )


def harmless(frame: bytes) -> bool:
    expected = predicted(frame)
    return not (isinstance(expected, Request) and expected.type in CHANGING)


@budget(300)
@given(garbage_frames())
@example(b"")
@example(b"[" * 100_000)
@example(b"1" * 5000)
@example(b'{"v": 1, "type": "submit", "id": "x", "body": {"argv": ["true"], "timeout_s": 1e999}}')
@example(b'{"v": 1, "type": "lease", "id": "x", "body": {"gpu": 0, "ttl_s": NaN}}')
def test_garbage_on_the_control_socket(rt: Runtime, control: Wire, frame: bytes) -> None:
    assume(harmless(frame))
    check_reply(control.reply_to([frame]), frame)


@budget(60)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=4), garbage_frames())
@example([b""], frame_of("hello", {}))
@example([b"", b""], b"")
def test_multipart_messages_are_answered_on_their_route(rt: Runtime, control: Wire, leading: list[bytes], frame: bytes) -> None:
    assume(harmless(frame))
    check_reply(control.reply_to([*leading, frame]), frame)


@budget(12)
@given(st.integers(-8, 0), st.sampled_from([b" ", b"x", b"\xff"]))
def test_messages_up_to_the_size_limit(rt: Runtime, control: Wire, delta: int, pad: bytes) -> None:
    # One byte more and zmq closes the connection unanswered, as it reads the
    # frame's size (tests/hostile/test_limits.py).
    head = frame_of("status", {})
    frame = head + pad * (MAX_BYTES + delta - len(head))
    check_reply(control.reply_to([frame]), frame)


@budget(150)
@given(st.sampled_from(sorted(REQUESTS)).flatmap(lambda t: valid_fields(REQUESTS[t]).map(lambda b: (t, b)))
       | garbage_frames().map(lambda f: ("", f)))
def test_read_only_socket_refuses_every_change(rt: Runtime, read_only: Wire, typed_body: tuple[str, Any]) -> None:
    type_, body = typed_body
    frame = frame_of(type_, body) if type_ else body
    reply = read_only.reply_to([frame])
    expected = predicted(frame)
    if isinstance(expected, Request) and expected.type in CHANGING:
        assert reply["re"] == expected.id and reply["error"]["code"] == ErrorCode.REFUSED, reply
    else:
        check_reply(reply, frame)


def submit_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """Valid submit bodies that run `true` (and only that), anything else random."""
    likely = st.fixed_dictionaries({}, optional={
        "gpu": st.none() | st.sampled_from([0, 1]),
        "timeout_s": st.none() | st.floats(1e-9, 60),
        "mode": st.just("process"),
        "env": st.dictionaries(st.text("ABCXYZ_", min_size=1, max_size=4), TEXT.filter(lambda v: "\0" not in v), max_size=3),
    })
    return st.tuples(valid_fields(REQUESTS["submit"]), likely).map(lambda bl: {**bl[0], **bl[1], "argv": ["true"]})


@budget(25)
@given(submit_bodies())
@example({"argv": ["true"], "env": {"A\x00B": "1"}}).via("a NUL in an environment name")
@example({"argv": ["true"], "env": {"A": "1\x00"}}).via("a NUL in an environment value")
@example({"argv": ["true"], "env": {"A=B": "1"}}).via("'=' in an environment name")
@example({"argv": ["true"], "env": {"": "1"}}).via("an empty environment name")
@example({"argv": ["true"], "cwd": "/tmp\x00x"}).via("a NUL in cwd")
@example({"argv": ["true\x00"]}).via("a NUL in argv")
@example({"argv": ["true"], "lease": True, "attach": True}).via("a leased, attached command")
def test_submitted_commands_run_and_end(rt: Runtime, control: Wire, submitted: list[str], body: dict[str, Any]) -> None:
    frame = frame_of("submit", body)
    reply = control.reply_to([frame])
    check_reply(reply, frame)
    event(f"submit: {reply['body']['state'] if reply['ok'] else reply['error']['code']}")
    if reply["ok"]:
        command_id = reply["body"]["id"]
        submitted.append(command_id)
        with rt.client(timeout_s=30) as c:
            result = c.call("wait", {"id": command_id, "attach": False})
        assert result["state"] in FINAL_STATES and result["id"] == command_id, result
        event(f"command: {result['state']}")
        if result["state"] != "finished":
            assert result["reason"], result
        if body.get("attach"):
            pushed = control.exchange([frame_of("hello", {})])  # the result push is in by now
            results = [m for m in control.pushes + [_envelope(p[-1]) for p in pushed]
                       if m.get("re") == json.loads(frame)["id"] and m["type"] == protocol.PUSH_RESULT]
            assert [m["body"]["state"] for m in results] == [result["state"]]
        control.pushes.clear()
    else:
        assert reply["error"]["code"] in (ErrorCode.BAD_REQUEST, ErrorCode.REFUSED, ErrorCode.UNSUPPORTED), reply
    check_untouched(rt)


def test_state_is_untouched_after_fuzzing(rt: Runtime, control: Wire) -> None:
    """Runs last in this module: the runtime still answers and holds nothing."""
    check_untouched(rt)
    assert control.reply_to([frame_of("status", {})])["body"]["pid"] == rt.proc.pid  # type: ignore[union-attr]


def test_handler_table_serves_every_request_type() -> None:
    """Every verb of the table has exactly one handler, and the changing set the
    server refuses to tenants and on the read-only socket is the table's."""
    assert set(handlers.HANDLERS) == set(REQUESTS) == set(verbs.VERBS)
    assert verbs.CHANGING == CHANGING
