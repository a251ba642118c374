"""Fuzzing the control protocol's pure functions: any bytes are a Request or a
ProtocolError with a reply code, never another exception."""

from __future__ import annotations

import json
from typing import Any

from fuzz_helpers import JUNK, TEXT, budget, mangled_fields, valid_fields
from hypothesis import example, given
from hypothesis import strategies as st

from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol.envelope import REQUESTS, ErrorCode, ProtocolError, Request
from krex_runtime.wire.typed import to_dict

MAX_BYTES = 4096
CODES = {v for k, v in vars(ErrorCode).items() if not k.startswith("_")}
TYPES = sorted(REQUESTS)


def decode(frame: bytes) -> Request | ProtocolError:
    try:
        req = protocol.decode_request(frame, MAX_BYTES)
    except ProtocolError as exc:
        assert exc.code in CODES, exc
        assert exc.reason, exc
        return exc
    assert isinstance(req, Request) and isinstance(req.body, REQUESTS[req.type])
    return req


def frame_of(msg: Any) -> bytes:
    return json.dumps(msg).encode()


def envelope(type_: str, body: Any) -> dict[str, Any]:
    return {"v": protocol.VERSION, "type": type_, "id": "fuzz-1", "time": 0.0, "body": body}


@budget(300)
@given(st.binary(max_size=200))
@example(b"[" * 5000)
@example(b'{"v": 1, "type": "status", "id": "x", "body": ' + b"[" * 5000 + b"]" * 5000 + b"}")
@example(b"1" * 5000)
@example(b"\xef\xbb\xbf{}")
def test_any_bytes_decode_or_refuse(frame: bytes) -> None:
    decode(frame)
    req_id = protocol.request_id_of(frame)
    assert req_id is None or isinstance(req_id, str)


@budget(300)
@given(JUNK)
def test_any_json_value_decodes_or_refuses(value: Any) -> None:
    decode(frame_of(value))


@budget(300)
@given(st.fixed_dictionaries({}, optional={"v": JUNK | st.just(1), "type": st.sampled_from(TYPES) | TEXT, "id": TEXT | JUNK,
                                           "time": JUNK, "body": JUNK, "re": JUNK}))
def test_any_envelope_decodes_or_refuses(msg: dict[str, Any]) -> None:
    result = decode(frame_of(msg))
    if isinstance(result, Request):
        assert (result.type, result.id) == (msg["type"], msg["id"])


def typed_bodies(fields: Any) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(request type, body) for every registered request type."""
    return st.sampled_from(TYPES).flatmap(lambda t: fields(REQUESTS[t]).map(lambda body: (t, body)))


@budget(400)
@given(typed_bodies(valid_fields))
def test_valid_bodies_decode_to_their_values(typed_body: tuple[str, dict[str, Any]]) -> None:
    type_, body = typed_body
    result = decode(frame_of(envelope(type_, body)))
    assert isinstance(result, Request), result
    decoded = to_dict(result.body)
    for key, value in body.items():
        assert decoded[key] == value


@budget(400)
@given(typed_bodies(mangled_fields))
@example(("submit", {"argv": ["true"], "timeout_s": 10**400})).via("an integer too large for a float field")
@example(("lease", {"gpu": 0, "ttl_s": float("nan")})).via("NaN")
@example(("submit", {"argv": ["true"], "timeout_s": float("inf")})).via("Infinity")
def test_mangled_bodies_are_bad_requests(typed_body: tuple[str, dict[str, Any]]) -> None:
    type_, body = typed_body
    result = decode(frame_of(envelope(type_, body)))
    if isinstance(result, ProtocolError):
        assert result.code in (ErrorCode.BAD_REQUEST, ErrorCode.BAD_MESSAGE), result
        if result.code == ErrorCode.BAD_REQUEST:
            assert result.reason.startswith("body"), result.reason


@budget(200)
@given(st.binary(max_size=200) | JUNK.map(frame_of))
@example(b"[1]")
@example(b'{"v": 2}')
@example(b"not json")
def test_any_reply_bytes_decode_or_refuse(frame: bytes) -> None:
    try:
        msg = protocol.decode_reply(frame)
    except ProtocolError as exc:
        assert exc.code in CODES and exc.reason
        return
    assert isinstance(msg, dict) and msg["v"] == protocol.VERSION


@budget(100)
@given(st.integers(min_value=0, max_value=3 * MAX_BYTES))
def test_size_limit_is_checked_first(size: int) -> None:
    frame = frame_of(envelope("status", {}))
    frame += b" " * max(0, size - len(frame))
    result = decode(frame)
    if len(frame) > MAX_BYTES:
        assert isinstance(result, ProtocolError) and result.code == ErrorCode.TOO_LARGE
    else:
        assert isinstance(result, Request)
