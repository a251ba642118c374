"""The asyncio client: `AsyncClient` and `AsyncHandle`, the same calls as
the blocking client, awaited.

One reader task per client takes every message from the control socket and
routes it (api/inbox.py) to the request it answers, so any number of
commands can be awaited at once on one connection.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, AsyncIterator, Iterable, Mapping, Sequence

import zmq
import zmq.asyncio

from krex_runtime.api import inbox as core
from krex_runtime.api.inbox import Follow, Inbox, Liveness, OutputCallback
from krex_runtime.api.results import Command, Event, NodeStatus, Result
from krex_runtime.api.sync import TELEMETRY_ENV, _path, _verb_wait, telemetry_from_hello
from krex_runtime.wire import endpoints, protocol
from krex_runtime.wire.control_client import (
    SEND_TIMEOUT_S,
    CurveKeys,
    HandshakeWatch,
    RuntimeUnavailable,
    check_reachable,
    use_curve,
)
from krex_runtime.wire.endpoints import client_control


class AsyncHandle:
    """A submitted command, awaited."""

    def __init__(self, client: AsyncClient, follow: Follow) -> None:
        self._client = client
        self._follow = follow
        assert follow.command_id is not None
        self.id: str = follow.command_id

    def done(self) -> bool:
        return self._follow.done

    def result(self) -> Result | None:
        """Its Result if it has ended, else None."""
        return self._follow.result() if self._follow.done else None

    async def wait(self, timeout: float | None = None) -> Result:
        """Until it ends; TimeoutError after `timeout` seconds (it keeps running)."""
        await self._client._until(lambda: self._follow.done, timeout)
        return self._follow.result()

    async def cancel(self) -> str:
        return await self._client.cancel(self.id)

    def __repr__(self) -> str:
        return f"AsyncHandle({self.id!r}, done={self._follow.done})"


class AsyncClient:
    """The asyncio twin of `Client` (same arguments). Use `async with`, or
    call `close()`; it must be used from one event loop."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        telemetry: str | None = None,
        curve_client_key: str | os.PathLike[str] | None = None,
        curve_server_key: str | os.PathLike[str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.endpoint = endpoint or client_control()
        self._keys = CurveKeys(_path(curve_client_key), _path(curve_server_key))
        self._telemetry = telemetry
        self._timeout = timeout
        self._ctx = zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            check_reachable(self.endpoint)
            use_curve(self._sock, self.endpoint, self._keys)
        except RuntimeUnavailable:
            self._sock.close()
            raise
        self._handshake = HandshakeWatch(self._sock, self.endpoint)
        self._sock.connect(self.endpoint)
        self._inbox = Inbox()
        self._alive = Liveness(time.monotonic())
        self._changed = asyncio.Condition()
        self._reader: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._waiting = 0  # coroutines awaiting a message: the reader pings only for them

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._handshake.close()
        self._sock.close(linger=0)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- commands -------------------------------------------------------------

    async def submit(
        self,
        argv: Sequence[str],
        *,
        gpu: int | None = None,
        gpus: int | Sequence[int] | None = None,
        mode: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        label: str | None = None,
        auto_region: bool | None = None,
        auto_region_entries: Sequence[str] | None = None,
        share: str | None = None,
        lease: bool = False,
        node_labels: Mapping[str, str] | None = None,
        gpu_model: str | None = None,
        retries: int | None = None,
        on_output: OutputCallback | None = None,
    ) -> AsyncHandle:
        """As `Client.submit`."""
        body = core.submit_body(
            argv, gpu=gpu, gpus=gpus, mode=mode, timeout=timeout, env=env, cwd=cwd, label=label,
            auto_region=auto_region, auto_region_entries=auto_region_entries, share=share, lease=lease,
            node_labels=node_labels, gpu_model=gpu_model, retries=retries,
        )
        return await self._follow("submit", body, on_output)

    async def attach(self, command_id: str, on_output: OutputCallback | None = None) -> AsyncHandle:
        """As `Client.attach`."""
        return await self._follow("wait", {"id": command_id, "attach": True}, on_output)

    async def _follow(self, verb: str, body: dict[str, Any], on_output: OutputCallback | None) -> AsyncHandle:
        msg = protocol.request(verb, body)
        request_id = msg["id"]
        follow = self._inbox.follow(request_id, on_output)  # before sending: the reader may get the reply first
        try:
            await self._send(msg)
            await self._until(lambda: follow.replied, self._timeout, reply_to=verb)
        except BaseException:
            self._inbox.forget(request_id)
            raise
        if follow.error is not None:
            self._inbox.forget(request_id)
            raise follow.error
        return AsyncHandle(self, follow)

    async def run(self, argv: Sequence[str], **options: Any) -> Result:
        return await (await self.submit(argv, **options)).wait()

    async def map(
        self, commands: Iterable[Command | Sequence[str]], *, max_in_flight: int = 8, **common: Any
    ) -> AsyncIterator[Result]:
        """As `Client.map`: an async iterator of Results in completion order."""
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        todo = iter(commands)
        in_flight: list[AsyncHandle] = []
        exhausted = False
        try:
            while True:
                while not exhausted and len(in_flight) < max_in_flight:
                    item = next(todo, None)
                    if item is None:
                        exhausted = True
                        break
                    argv, options = core.options_of(item, common)
                    in_flight.append(await self.submit(argv, **options))
                if not in_flight:
                    return
                await self._until(lambda: any(h.done() for h in in_flight), None)
                for h in [h for h in in_flight if h.done()]:
                    in_flight.remove(h)
                    yield h._follow.result()
        finally:
            # Together: each reply waits for its command's end. Best effort: the runtime may be gone.
            await asyncio.gather(*(h.cancel() for h in in_flight if not h.done()), return_exceptions=True)

    async def cancel(self, command_id: str) -> str:
        return core.state_of(await self.call("cancel", {"id": command_id}), "cancel")

    # --- the node -------------------------------------------------------------

    async def status(self) -> NodeStatus:
        return NodeStatus.from_record(await self.call("status"))

    async def call(self, verb: str, body: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        msg = protocol.request(verb, dict(body or {}))
        request_id = msg["id"]
        self._inbox.expect(request_id)
        wait_s = timeout if timeout is not None else _verb_wait(verb, self._timeout)
        try:
            await self._send(msg)
            await self._until(lambda: request_id in self._inbox.replies, wait_s, reply_to=verb)
        finally:
            msg = self._inbox.take_reply(request_id)
            self._inbox.calls.discard(request_id)
        assert msg is not None
        return core.reply_body(msg)

    async def events(self, *, idle_timeout: float | None = None) -> AsyncIterator[Event]:
        """As `Client.events`."""
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            endpoint = self._telemetry or endpoints.client_telemetry(self.endpoint) or os.environ.get(TELEMETRY_ENV, "")
            if not endpoint:
                endpoint = telemetry_from_hello(self.endpoint, await self.call("hello", {"client": "krex-api"}))
            use_curve(sock, endpoint, self._keys)
            sock.setsockopt(zmq.SUBSCRIBE, protocol.TOPIC_EVENT)
            sock.connect(endpoint)
            while True:
                if not await sock.poll(int(idle_timeout * 1000) if idle_timeout is not None else None):
                    return
                frames = await sock.recv_multipart()
                if len(frames) == 2 and frames[0] == protocol.TOPIC_EVENT:
                    yield Event.from_wire(protocol.load_json(frames[1]))
        finally:
            sock.close(linger=0)

    # --- the reader -----------------------------------------------------------

    async def _send(self, msg: dict[str, Any]) -> None:
        if self._failure is not None:
            raise self._failure
        await self._send_frame(protocol.encode(msg))
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _send_frame(self, frame: bytes) -> None:
        """Send, bounded: a socket whose runtime refused its CURVE key has no
        connection left to send on (control_client.SEND_TIMEOUT_S)."""
        self._handshake.check()
        try:
            await asyncio.wait_for(self._sock.send(frame), SEND_TIMEOUT_S)
        except asyncio.TimeoutError:
            self._handshake.check()
            raise RuntimeUnavailable(f"cannot send to the krex runtime at {self.endpoint}: no connection") from None

    async def _until(self, done: Any, timeout: float | None, reply_to: str | None = None) -> None:
        """Wait for `done()` as the reader routes messages; after `timeout`,
        TimeoutError (awaiting a reply: RuntimeUnavailable)."""
        self._waiting += 1
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(lambda: done() or self._failure is not None), timeout)
        except asyncio.TimeoutError:
            if reply_to is not None:
                raise RuntimeUnavailable(f"no reply from the krex runtime at {self.endpoint} (the reply to {reply_to})") from None
            raise TimeoutError("timed out waiting for the command to end") from None
        finally:
            self._waiting -= 1
        if not done() and self._failure is not None:
            raise self._failure

    async def _read(self) -> None:
        try:
            while True:
                ready = await self._sock.poll(int(core.PING_AFTER_S * 1000))
                self._handshake.check()  # a refused CURVE key: every waiter hears why
                if ready:
                    msg = protocol.decode_reply(await self._sock.recv())
                    self._inbox.note_dropped(msg)
                    if not self._alive.heard(msg, time.monotonic()):
                        self._inbox.feed(msg)
                    for request in self._inbox.ask_again():  # the runtime dropped messages to us (inbox.py)
                        await self._send_frame(protocol.encode(request))
                    async with self._changed:
                        self._changed.notify_all()
                    continue
                now = time.monotonic()
                if self._waiting and self._alive.dead(now):
                    raise RuntimeUnavailable(f"the krex runtime at {self.endpoint} stopped answering")
                if self._waiting and self._alive.quiet(now):
                    msg = protocol.request("hello", {"client": "krex-api"})
                    await self._send_frame(protocol.encode(msg))
                    self._alive.ping_id, self._alive.ping_sent = msg["id"], now
                elif not self._waiting:
                    self._alive.last_heard = now
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a dead runtime or a reply that is not one: every waiter hears it
            self._failure = exc
            async with self._changed:
                self._changed.notify_all()
