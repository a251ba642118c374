"""The routing of what the runtime sends back to the request it answers
(replies, a followed command's output, its result): the client's
bookkeeping, without I/O (the reader in aio.py feeds it).

A followed submission attaches (`attach: true`): the runtime pushes the
command's output and result over the control socket (docs/protocol.md,
"Attaching to a command"), so a client on another machine (tcp + CURVE) gets
them as one on the node does; no output file is read.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from krex_runtime.api.options import OutputCallback
from krex_runtime.api.refused import RequestFailed
from krex_runtime.api.results import Result, malformed
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol.envelope import ProtocolError

UNCLAIMED_KEPT = 256


@dataclass
class Follow:
    """One submitted command, as its messages arrive."""

    request_id: str
    on_output: OutputCallback | None = None
    command_id: str | None = None
    # Refused, a reply that is not one, or what its on_output raised: its wait ends in it.
    error: Exception | None = None
    record: dict[str, Any] | None = None
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    incomplete: bool = False  # messages to this client were dropped while it followed

    @property
    def replied(self) -> bool:
        return self.command_id is not None or self.error is not None

    @property
    def done(self) -> bool:
        return self.record is not None or self.error is not None

    def result(self) -> Result:
        """Its Result; the error instead when it ended in one."""
        if self.error is not None:
            raise self.error
        assert self.record is not None
        result = Result.from_record(self.record, "".join(self.stdout), "".join(self.stderr))
        return replace(result, output_incomplete=True) if self.incomplete else result


class Inbox:
    """Routes each message from the runtime by the request it names (`re`)."""

    def __init__(self) -> None:
        self.follows: dict[str, Follow] = {}
        self.replies: dict[str, dict[str, Any]] = {}  # request id -> reply, for plain calls
        self.calls: set[str] = set()
        # A runtime drops what it sends a client that does not read (its queue
        # full) and says so in its next reply (`dropped`): a result may be among
        # them, so each unfinished command is asked for its result again.
        self.lost = 0
        self.rewaits: dict[str, Follow] = {}  # request id of a plain `wait` -> its command
        # Messages no call awaits (answers to raw sends), for `receive`; bounded,
        # as a client that never receives would otherwise keep them all.
        self.unclaimed: deque[dict[str, Any]] = deque(maxlen=UNCLAIMED_KEPT)

    def note_dropped(self, msg: dict[str, Any]) -> None:
        """Count what a reply says was lost; any reply, a ping's answer too."""
        if msg.get("type") == "reply" and isinstance(msg.get("dropped"), int):
            self.lost += msg["dropped"]

    def ask_again(self) -> list[dict[str, Any]]:
        """The `wait` requests to send, one per unfinished command, once
        messages were lost (then none until more are); their replies are
        routed to the commands they ask for."""
        if not self.lost:
            return []
        self.lost = 0
        asked = {id(f) for f in self.rewaits.values()}
        requests = []
        for f in self.follows.values():
            if f.done:
                continue
            f.incomplete = True
            if f.command_id is not None and id(f) not in asked:
                request = protocol.request("wait", {"id": f.command_id, "attach": False})
                self.rewaits[request["id"]] = f
                requests.append(request)
        return requests

    def follow(self, request_id: str, on_output: OutputCallback | None = None) -> Follow:
        f = Follow(request_id, on_output)
        self.follows[request_id] = f
        return f

    def expect(self, request_id: str) -> None:
        self.calls.add(request_id)

    def take_reply(self, request_id: str) -> dict[str, Any] | None:
        msg = self.replies.pop(request_id, None)
        if msg is not None:
            self.calls.discard(request_id)
        return msg

    def forget(self, request_id: str) -> None:
        self.follows.pop(request_id, None)
        self.calls.discard(request_id)
        self.replies.pop(request_id, None)

    def feed(self, msg: dict[str, Any]) -> str | None:
        """Take one message; the request id it concerned, None if none we await."""
        re = msg.get("re")
        if not isinstance(re, str):
            return None
        again = self.rewaits.pop(re, None) if msg.get("type") == "reply" else None
        if again is not None:
            # Its result (a `wait` reply's body is the result record), unless one came meanwhile.
            if not again.done:
                try:
                    again.record = checked_result(reply_body(msg))
                except RequestFailed as exc:
                    if exc.code == "busy":
                        self.lost += 1  # not served yet (still stalled, or too many requests): asked at the next reply
                    else:
                        again.error = exc
                except ProtocolError as exc:
                    again.error = exc
            return again.request_id
        if re in self.calls and msg.get("type") == "reply":
            self.replies[re] = msg
            return re
        f = self.follows.get(re)
        if f is None:
            return None
        # decode_reply checked the envelope: pushes have an object body, error replies {code, reason}.
        kind, body = msg.get("type"), msg.get("body")
        try:
            if kind == "reply":
                if not msg["ok"]:
                    f.error = RequestFailed(msg["error"]["code"], msg["error"]["reason"])
                elif not isinstance(body, dict) or not isinstance(body.get("id"), str) or not body["id"]:
                    raise malformed(f"the reply to {re} names no command id")
                else:
                    f.command_id = body["id"]
            elif kind == protocol.PUSH_OUTPUT and isinstance(body, dict):
                stream, text = body.get("stream"), body.get("data")
                if stream not in ("stdout", "stderr") or not isinstance(text, str):
                    raise malformed("an output push needs a stream (stdout or stderr) and its text")
                (f.stdout if stream == "stdout" else f.stderr).append(text)
                if f.on_output is not None and f.error is None:
                    try:
                        f.on_output(stream, text)
                    except Exception as exc:  # the caller's callback: it ends that command's wait, not the connection
                        f.error = exc
            elif kind == protocol.PUSH_RESULT:
                f.record = checked_result(body)
        except ProtocolError as exc:
            f.error = exc
        return re


def checked_result(body: Any) -> dict[str, Any]:
    """A result record, once it reads as one (ProtocolError if not)."""
    Result.from_record(body)
    return dict(body)


def state_of(body: Any, verb: str) -> str:
    """The `state` a reply body names (a cancel's), or ProtocolError."""
    if not isinstance(body, dict) or not isinstance(body.get("state"), str):
        raise malformed(f"the reply to {verb} names no state")
    return str(body["state"])


def reply_body(msg: dict[str, Any]) -> Any:
    """A reply's body, or RequestFailed for an error reply."""
    if msg.get("ok"):
        return msg.get("body", {})
    err = msg.get("error") or {}
    raise RequestFailed(err.get("code", "unknown"), err.get("reason", "request failed"))
