"""One agent's connection to its node's runtime: the control socket (requests,
replies, and the pushes of the commands it follows) and the telemetry socket.

It speaks only the control protocol (krex_runtime.wire) over the runtime's
one transport (krex_runtime.transport), as any client of a runtime does; what
it adds is the agent's routing (the pushes of its followed requests, every
telemetry frame as it came). A link lives as long as one runtime process (one
epoch of the node) and is closed when that runtime is gone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from krex_runtime.transport import Connection, RuntimeUnavailable, Subscription
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol

# Called with (request id, message) for every push (output, result) of a followed request.
OnPush = Callable[[str, dict[str, Any]], None]
# Called with (topic, frame) for every telemetry message.
OnTelemetry = Callable[[bytes, bytes], None]


class LinkLost(Exception):
    """The runtime did not answer, or the link was closed."""


class RuntimeLink:
    def __init__(self, run_dir: Any, on_push: OnPush, on_telemetry: OnTelemetry) -> None:
        # Not checked for access: the agent connects before its runtime has
        # made its sockets, and asks until it answers. Unbounded queue: every
        # command's output and result come on this one connection, and a
        # runtime whose queue to a client fills drops what it sends (and
        # stalls that client); queued on this side, nothing is lost.
        self.control = Connection(endpoints.control(run_dir), check_access=False, unbounded_queue=True)
        self.telemetry = Subscription(endpoints.telemetry(run_dir), [b""], check_access=False)
        self.on_push = on_push
        self.on_telemetry = on_telemetry
        self.followed: set[str] = set()  # request ids whose pushes go to on_push
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.tasks = [asyncio.ensure_future(self._read_control()), asyncio.ensure_future(self._read_telemetry())]
        self.closed = False

    async def request(
        self, verb: str, body: dict[str, Any], timeout_s: float, follow: bool = False, request_id: str | None = None
    ) -> dict[str, Any]:
        """Send one request; its reply message (ok or error). `follow`: the
        pushes that come after the reply go to on_push under its request id."""
        if self.closed:
            raise LinkLost("the link to the runtime is closed")
        msg = protocol.request(verb, body)
        if request_id is not None:
            msg["id"] = request_id
        reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[msg["id"]] = reply
        if follow:
            self.followed.add(msg["id"])
        try:
            await self.control.send(protocol.encode(msg))
            return await asyncio.wait_for(reply, timeout_s)
        except RuntimeUnavailable as exc:
            self.followed.discard(msg["id"])
            raise LinkLost(str(exc)) from None
        except TimeoutError:
            self.followed.discard(msg["id"])
            raise LinkLost(f"no reply to {verb} within {timeout_s:g} s") from None
        finally:
            self.waiting.pop(msg["id"], None)

    def unfollow(self, request_id: str) -> None:
        self.followed.discard(request_id)

    async def _read_control(self) -> None:
        while True:
            try:
                frame = await self.control.receive(None)
                if frame is None:
                    continue
                msg = protocol.decode_reply(frame)
            except protocol.ProtocolError:
                continue  # not a message of the protocol: nothing to route it to
            re = msg.get("re")
            if msg.get("type") == "reply" and re in self.waiting:
                future = self.waiting[re]
                if not future.done():
                    future.set_result(msg)
            elif re in self.followed:
                if msg.get("type") == protocol.PUSH_RESULT:
                    self.followed.discard(re)
                self.on_push(re, msg)

    async def _read_telemetry(self) -> None:
        while True:
            frames = await self.telemetry.receive()
            if len(frames) == 2:
                self.on_telemetry(frames[0], frames[1])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for task in self.tasks:
            task.cancel()
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(LinkLost("the runtime is gone"))
        self.control.close()
        self.telemetry.close()


def with_node(frame: bytes, node: str) -> bytes:
    """A telemetry message's JSON with a top-level "node" added, the rest
    byte for byte as the runtime sent it (no parse: snapshots are large)."""
    if not frame.startswith(b"{"):
        return frame
    head = b'{"node":' + json.dumps(node).encode()
    return head + (b"}" if frame.strip() == b"{}" else b"," + frame[1:])
