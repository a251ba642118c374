"""The control and telemetry protocol: one versioned message spec (docs/protocol.md).

Every message is one JSON object in one ZeroMQ frame:

    {"v": 1, "type": "...", "id": "...", "time": 1732870000.123, "body": {...}}

Replies carry "re" (the request's id) and either "ok": true with a body or
"ok": false with {"code", "reason"}. The verb table (verbs.py) maps each
request type to the dataclass its body must fit; the runtime's handlers are
keyed by the same verbs.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Literal

from krex_runtime.wire.protocol.verbs import VERBS
from krex_runtime.wire.typed import ShapeError, from_dict, to_dict

VERSION = 1

# Exit codes of `krex run` / `krex wait` when the command itself gave none.
EXIT_TIMEOUT = 124
EXIT_KREX_ERROR = 125
EXIT_SIGNAL_BASE = 128


class ErrorCode:
    BAD_MESSAGE = "bad_message"  # not JSON, not an object, envelope fields missing
    TOO_LARGE = "too_large"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_TYPE = "unknown_type"
    BAD_REQUEST = "bad_request"  # body does not fit the request type
    NOT_FOUND = "not_found"
    REFUSED = "refused"  # read-only client, shutting down, paused target
    FORBIDDEN = "forbidden"  # a changing request from a tenant of the runtime
    QUEUE_FULL = "queue_full"
    UNSUPPORTED = "unsupported"  # a field this runtime knows but cannot do yet
    BUSY = "busy"  # too many requests of this client (or in all) being answered: try again later
    INTERNAL = "internal"


class ProtocolError(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


# Pushed to a client that attached to a command, after the reply to its request.
PUSH_OUTPUT = "output"
PUSH_RESULT = "result"

# Telemetry topics on the PUB socket (first frame of each message).
TOPIC_EVENT = b"event"
TOPIC_SNAPSHOT = b"snapshot"

_ids = itertools.count(1)
_id_prefix = f"{os.getpid():x}"


def new_id() -> str:
    return f"{_id_prefix}-{next(_ids)}"


def envelope(type_: str, body: Any, **extra: Any) -> dict[str, Any]:
    msg = {"v": VERSION, "type": type_, "id": new_id(), "time": time.time(), "body": to_dict(body)}
    msg.update(extra)
    return msg


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def request(type_: str, body: Any = None) -> dict[str, Any]:
    return envelope(type_, body if body is not None else {})


def reply_ok(req_id: str | None, body: Any = None) -> dict[str, Any]:
    return envelope("reply", body if body is not None else {}, re=req_id, ok=True)


def reply_error(req_id: str | None, code: str, reason: str) -> dict[str, Any]:
    msg = envelope("reply", {}, re=req_id, ok=False, error={"code": code, "reason": reason})
    return msg


def push(type_: str, req_id: str, body: Any) -> dict[str, Any]:
    return envelope(type_, body, re=req_id)


@dataclass(frozen=True)
class Request:
    type: str
    id: str
    body: Any


def load_json(frame: bytes) -> Any:
    """One JSON document, or ProtocolError(bad_message) whatever the bytes."""
    try:
        return json.loads(frame)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the int digit limit
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"not JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "not JSON: nested too deeply") from None


def decode_request(frame: bytes, max_bytes: int) -> Request:
    """Parse and validate one control request; raises ProtocolError with a reply code."""
    if len(frame) > max_bytes:
        raise ProtocolError(ErrorCode.TOO_LARGE, f"message of {len(frame)} bytes exceeds {max_bytes}")
    msg = load_json(frame)
    if not isinstance(msg, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "a message must be a JSON object")
    version = msg.get("v")
    if version != VERSION:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION, f"protocol version {version!r} is not supported (this runtime speaks {VERSION})"
        )
    type_, req_id = msg.get("type"), msg.get("id")
    if not isinstance(type_, str) or not isinstance(req_id, str):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "'type' and 'id' must be strings")
    verb = VERBS.get(type_)
    if verb is None:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown request type {type_!r}")
    problem = not_text(msg.get("body", {}), "body")
    if problem:
        raise ProtocolError(ErrorCode.BAD_REQUEST, problem)
    try:
        body: Any = from_dict(verb.body, msg.get("body", {}), "body")
    except ShapeError as exc:
        raise ProtocolError(ErrorCode.BAD_REQUEST, str(exc)) from None
    return Request(type_, req_id, body)


def not_text(value: Any, path: str) -> str:
    """Where a request holds a string that is not Unicode text ("" when none
    does): JSON's `\\udc80` escape decodes to a lone surrogate, which no
    encoding can write, so every client that printed it (`krex ls`, for every
    user) would fail on it. Refused at the door, keys and values alike; a
    loop, not recursion, as deep as the parser let the message nest."""
    todo: list[tuple[Any, str]] = [(value, path)]
    while todo:
        item, where = todo.pop()
        if isinstance(item, str):
            bad = next((c for c in item if "\ud800" <= c <= "\udfff"), None)
            if bad is not None:
                return f"{where}: holds a lone surrogate ({ascii(bad)[1:-1]}): not Unicode text"
        elif isinstance(item, list):
            todo.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key, v in reversed(list(item.items())):
                inner = f"{where}.{ascii(key)[1:-1]}"
                todo += [(v, inner), (key, inner)]
    return ""


def request_id_of(frame: bytes) -> str | None:
    """Best effort: the id of a message that failed validation, so the error names it."""
    try:
        msg = load_json(frame)
    except ProtocolError:
        return None
    req_id = msg.get("id") if isinstance(msg, dict) else None
    if isinstance(req_id, str):
        return req_id
    return None


def decode_reply(frame: bytes) -> dict[str, Any]:
    """One message from the runtime, its envelope checked (what a client reads
    of it has the type the protocol says), or ProtocolError: a client meets a
    malformed reply as this error, never as a KeyError or AttributeError."""
    msg = load_json(frame)
    if not isinstance(msg, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "the runtime replied with something other than a JSON object")
    if msg.get("v") != VERSION:
        raise ProtocolError(ErrorCode.UNSUPPORTED_VERSION, f"runtime replied with protocol {msg.get('v')!r}")
    problem = _envelope_problem(msg)
    if problem:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"the runtime sent a malformed message: {problem}")
    return msg


def _envelope_problem(msg: dict[str, Any]) -> str:
    """What is wrong with a message's envelope ("" when nothing is)."""
    kind, re = msg.get("type"), msg.get("re")
    if not isinstance(kind, str):
        return "'type' is not a string"
    if re is not None and not isinstance(re, str):
        return "'re' is not a string"
    if kind == "reply":
        if not isinstance(msg.get("ok"), bool):
            return "a reply's 'ok' is not true or false"
        dropped = msg.get("dropped")
        if dropped is not None and (not isinstance(dropped, int) or isinstance(dropped, bool) or dropped < 0):
            return "a reply's 'dropped' is not a count"
        error = msg.get("error")
        if not msg["ok"] and not (isinstance(error, dict) and isinstance(error.get("code"), str)
                                  and isinstance(error.get("reason"), str)):
            return "an error reply's 'error' is not {code, reason} strings"
    elif kind in (PUSH_OUTPUT, PUSH_RESULT) and (not isinstance(re, str) or not isinstance(msg.get("body"), dict)):
        return f"a '{kind}' push needs a string 're' and an object 'body'"
    return ""


# --- the result record of a finished command ----------------------------------

CommandState = Literal["queued", "running", "finished", "timeout", "cancelled", "failed"]
FINAL_STATES: frozenset[str] = frozenset({"finished", "timeout", "cancelled", "failed"})



def exit_status_of(result: dict[str, Any]) -> int:
    """The exit status `krex run` / `krex wait` give for a command's result."""
    if result["state"] == "timeout":
        return EXIT_TIMEOUT
    if result.get("signal"):
        return EXIT_SIGNAL_BASE + int(result["signal"])
    if result.get("exit_code") is not None:
        return int(result["exit_code"])
    return EXIT_KREX_ERROR


# Each request type's body dataclass, from the verb table.
REQUESTS: dict[str, type] = {name: verb.body for name, verb in VERBS.items()}
