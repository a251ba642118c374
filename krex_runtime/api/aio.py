"""The asyncio client, `AsyncClient` and `AsyncHandle`: the one
implementation of the Python API's calls. The blocking `Client` (sync.py)
runs it on an event loop of its own.

One reader task per client takes every message from the control socket and
routes it (api/inbox.py) to the request it answers, so any number of
commands can be awaited at once on one connection.

A failure the reader meets ends waits, not the client: a runtime that
stopped answering or a message that is not one of the protocol fails every
wait under way (or, when none is, the next one), and a later call is served
if the runtime answers again. Only a refused CURVE handshake ends the client.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from krex_runtime.api import evaluate as evaluating
from krex_runtime.api.inbox import Follow, Inbox, reply_body, state_of
from krex_runtime.api.options import Command, OutputCallback, SubmitOptions, split, takes_options
from krex_runtime.api.refused import RequestFailed
from krex_runtime.api.results import Event, NodeStatus, Result
from krex_runtime.transport import Connection, CurveKeys, RuntimeUnavailable, Subscription
from krex_runtime.transport.liveness import PING_AFTER_S, Liveness
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol.envelope import ProtocolError
from krex_runtime.wire.protocol.verbs import REPLY_WAIT_S, VERBS

TELEMETRY_ENV = "KREX_TELEMETRY"  # the telemetry endpoint of a tcp runtime
HELLO = {"client": "krex-api"}
# cancel_many: cancels in flight at once (each reply waits for its command's
# end), well under the runtime's runtime.max_requests_per_peer default (64);
# one refused `busy` (a runtime set lower) is sent again after a pause.
CANCELS_IN_FLIGHT = 8
BUSY_RETRIES = 20
BUSY_PAUSE_S = 0.05
# What a cancel may be refused for one command alone; any other refusal is the request's.
PER_COMMAND_REFUSALS = frozenset({protocol.ErrorCode.NOT_FOUND, protocol.ErrorCode.BUSY})


class AsyncHandle:
    """A submitted command: await its end, cancel it, or look at its result."""

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

    async def wait(self, timeout: float | None = None) -> Result:  # noqa: ASYNC109 (the API's documented name)
        """Until it ends; TimeoutError after `timeout` seconds (it keeps
        running: cancel it if you gave up on it)."""
        await self._client._until(lambda: self._follow.done, timeout, f"command {self.id}")
        return self._follow.result()

    async def cancel(self) -> str:
        """Cancel it; its state after the cancel (`cancelled`, or how it had already ended)."""
        return await self._client.cancel(self.id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, done={self._follow.done})"


class AsyncClient:
    """A client of one runtime's control socket, used from one event loop
    (`async with`, or `await close()`).

    endpoint: default KREX_ENDPOINT, else the control socket of KREX_RUN_DIR
    (else the default run dir). A tcp endpoint needs CURVE key files: this
    client's NAME.key_secret and the runtime's public NAME.key (default:
    KREX_CURVE_CLIENT_KEY, KREX_CURVE_SERVER_KEY). telemetry: the PUB
    endpoint for `events()` (ipc: found beside the control socket; tcp:
    default KREX_TELEMETRY). timeout: how long a plain request waits for its reply.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        telemetry: str | None = None,
        curve_client_key: str | os.PathLike[str] | None = None,
        curve_server_key: str | os.PathLike[str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.endpoint = endpoint or endpoints.client_control()
        self._keys = CurveKeys(_path(curve_client_key), _path(curve_server_key))
        self._telemetry = telemetry
        self._timeout = timeout
        self._connection = Connection(self.endpoint, self._keys)
        self._inbox = Inbox()
        self._alive = Liveness(time.monotonic())
        self._changed = asyncio.Condition()
        self._reader: asyncio.Task[None] | None = None
        self._waiting = 0  # coroutines awaiting a message: the reader pings only for them
        # What the reader met, for the waits (see the module's docstring):
        self._failures = 0  # how many failures so far: a wait ends in the ones after its start
        self._failure: BaseException | None = None  # the latest
        self._failure_raised = True  # some wait ended in it (else the next one does)
        self._broken: BaseException | None = None  # no message can come any more

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._connection.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- commands -------------------------------------------------------------

    @takes_options
    async def submit(self, argv: Sequence[str], **options: Any) -> AsyncHandle:
        """Queue a command and follow it; returns once the runtime accepted it
        (RequestFailed if refused). The options: `SubmitOptions`."""
        return await self._submit(argv, SubmitOptions(**options))

    async def _submit(self, argv: Sequence[str], options: SubmitOptions) -> AsyncHandle:
        return await self._follow("submit", options.body(argv, attach=True), options.on_output)

    @takes_options
    async def enqueue(self, argv: Sequence[str], **options: Any) -> dict[str, Any]:
        """Queue a command that this client does not follow (`krex submit`):
        the runtime's reply, `{"id", "state"}`; `attach(id)` follows it later."""
        given = SubmitOptions(**options)
        if given.on_output is not None:
            raise ValueError("enqueue follows nothing, so on_output would never be called: use submit")
        reply: dict[str, Any] = await self.call("submit", given.body(argv, attach=False))
        return reply

    async def attach(self, command_id: str, on_output: OutputCallback | None = None) -> AsyncHandle:
        """Follow a command submitted earlier (by anyone): its output so far,
        then the rest, then its Result (a finished one's at once)."""
        return await self._follow("wait", {"id": command_id, "attach": True}, on_output)

    async def _follow(self, verb: str, body: dict[str, Any], on_output: OutputCallback | None) -> AsyncHandle:
        """Send a request that attaches to a command; its handle once the runtime accepted it."""
        msg = protocol.request(verb, body)
        request_id = msg["id"]
        follow = self._inbox.follow(request_id, on_output)  # before sending: the reader may get the reply first
        try:
            await self._send(msg)
            await self._until(lambda: follow.replied, self._timeout, f"the reply to {verb}", reply=True)
        except BaseException:
            self._inbox.forget(request_id)
            raise
        if follow.error is not None:
            self._inbox.forget(request_id)
            raise follow.error
        return AsyncHandle(self, follow)

    @takes_options
    async def run(self, argv: Sequence[str], **options: Any) -> Result:
        """Submit a command and wait for its Result."""
        return await (await self.submit(argv, **options)).wait()

    @takes_options
    async def map(
        self, commands: Iterable[Command | Sequence[str]], *, max_in_flight: int = 8, **common: Any
    ) -> AsyncIterator[Result]:
        """Run many commands, at most `max_in_flight` submitted at a time, and
        yield each Result as its command ends (completion order: match them by
        `id` or `label`). Each item is an argv or a Command; `common` options
        apply to all (a Command's own win). Leaving the loop early cancels the
        commands still in flight."""
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        shared = SubmitOptions(**common)
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
                    in_flight.append(await self._submit(*split(item, shared)))
                if not in_flight:
                    return
                await self._until(lambda: any(h.done() for h in in_flight), None, "a command to end")
                for h in [h for h in in_flight if h.done()]:
                    in_flight.remove(h)
                    yield h._follow.result()
        finally:
            # Together: each reply waits for its command's end. Best effort: the runtime may be gone.
            await asyncio.gather(*(h.cancel() for h in in_flight if not h.done()), return_exceptions=True)

    # Candidate kernels against their problems, one command each (api/evaluate.py).
    evaluate = evaluating.evaluate
    evaluate_many = evaluating.evaluate_many

    async def cancel(self, command_id: str) -> str:
        """Cancel a queued or running command; its state after the cancel."""
        return state_of(await self.call("cancel", {"id": command_id}), "cancel")

    async def cancel_many(self, command_ids: Iterable[str], *, max_in_flight: int = CANCELS_IN_FLIGHT
                          ) -> dict[str, str | RequestFailed]:
        """Cancel several commands, `max_in_flight` at a time (each reply waits
        for its command's end): each id's state after the cancel, or what the
        runtime refused for that id alone (an id it does not know:
        `not_found`). A refusal of the request itself (`forbidden`,
        `refused`) and any other failure are raised, as by `cancel`."""
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        todo = list(dict.fromkeys(command_ids))
        gate = asyncio.Semaphore(max_in_flight)

        async def one(command_id: str) -> str | RequestFailed:
            async with gate:
                attempt = 0
                while True:
                    try:
                        return await self.cancel(command_id)
                    except RequestFailed as exc:
                        attempt += 1
                        if exc.code == protocol.ErrorCode.BUSY and attempt < BUSY_RETRIES:
                            await asyncio.sleep(BUSY_PAUSE_S * attempt)  # past the runtime's bound per client
                            continue
                        if exc.code in PER_COMMAND_REFUSALS:
                            return exc
                        raise

        try:
            async with asyncio.TaskGroup() as group:  # the first failure of the request ends the rest
                tasks = {i: group.create_task(one(i)) for i in todo}
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return {i: task.result() for i, task in tasks.items()}

    # --- the node -------------------------------------------------------------

    async def status(self) -> NodeStatus:
        return NodeStatus.from_record(await self.call("status"))

    async def show(self, command_id: str) -> Result:
        """One command as it is now, without waiting for its end: a queued or
        running one's state and times so far, an ended one's result (its
        output is in its files: `logs`). `argv` is its command line."""
        return Result.from_record(await self.call("show", {"id": command_id}))

    async def call(self, verb: str, body: Mapping[str, Any] | None = None,
                   timeout: float | None = None) -> Any:  # noqa: ASYNC109 (the API's documented name)
        """Any verb of the protocol (docs/protocol.md): its reply body, or RequestFailed."""
        msg = protocol.request(verb, dict(body or {}))
        request_id = msg["id"]
        self._inbox.expect(request_id)
        wait_s = timeout if timeout is not None else _verb_wait(verb, self._timeout)
        try:
            await self._send(msg)
            await self._until(lambda: request_id in self._inbox.replies, wait_s, f"the reply to {verb}", reply=True)
        finally:
            reply = self._inbox.take_reply(request_id)
            self._inbox.calls.discard(request_id)
        assert reply is not None
        return reply_body(reply)

    async def events(self, *, idle_timeout: float | None = None) -> AsyncIterator[Event]:
        """The runtime's events as they happen (the telemetry PUB socket).
        Ends after `idle_timeout` seconds without one (None: never)."""
        endpoint = self._telemetry or endpoints.client_telemetry(self.endpoint) or os.environ.get(TELEMETRY_ENV, "")
        if not endpoint:
            endpoint = telemetry_from_hello(self.endpoint, await self.call("hello", HELLO))
        # Not checked for access: a runtime's PUB socket is beside its control socket, and opened with it.
        subscription = Subscription(endpoint, [protocol.TOPIC_EVENT], self._keys, check_access=False)
        try:
            while True:
                if not await subscription.wait(idle_timeout):
                    return
                frames = await subscription.receive()
                if len(frames) == 2 and frames[0] == protocol.TOPIC_EVENT:
                    yield Event.from_wire(protocol.load_json(frames[1]))
        finally:
            subscription.close()

    # --- raw messages ---------------------------------------------------------

    async def send(self, verb: str, body: Mapping[str, Any] | None = None) -> str:
        """Send a request without waiting for its reply: its id. The reply
        comes from `receive` (a test of the runtime's answers, a request left
        unanswered on purpose)."""
        msg = protocol.request(verb, dict(body or {}))
        await self._send(msg)
        return str(msg["id"])

    async def send_raw(self, frame: bytes) -> None:
        """Put bytes on the wire as they are (tests of malformed input); the
        runtime's answer comes from `receive`."""
        if self._broken is not None:
            raise self._broken
        await self._send_frame(frame)
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())

    async def receive(self, timeout: float) -> dict[str, Any] | None:  # noqa: ASYNC109 (as call's)
        """The next message that answers no call of this client (a `send`'s
        or `send_raw`'s reply), or None after `timeout` seconds; the
        reader's failure (a refused CURVE key) as soon as it is met."""
        try:
            await self._until(lambda: bool(self._inbox.unclaimed), timeout, "a message")
        except TimeoutError:
            return None
        return self._inbox.unclaimed.popleft()

    # --- the reader -----------------------------------------------------------

    async def _send(self, msg: dict[str, Any]) -> None:
        await self.send_raw(protocol.encode(msg))

    async def _send_frame(self, frame: bytes) -> None:
        """Send, bounded: a runtime that refused this client's CURVE key left no connection to send on."""
        await self._connection.send(frame)

    async def _until(self, done: Callable[[], bool], wait_s: float | None, what: str, reply: bool = False) -> None:
        """Wait for `done()` as the reader routes messages. After `wait_s`,
        TimeoutError (awaiting a `reply`: RuntimeUnavailable); the reader's
        failure that came meanwhile, or that no wait has yet ended in."""
        since = self._failures - (0 if self._failure_raised else 1)

        def ended() -> bool:
            return done() or self._broken is not None or self._failures > since

        self._waiting += 1
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(ended), wait_s)
        except TimeoutError:
            if reply:
                raise RuntimeUnavailable(f"no reply from the krex runtime at {self.endpoint} ({what})") from None
            raise TimeoutError(f"timed out waiting for {what}") from None
        finally:
            self._waiting -= 1
        if done():
            return
        if self._broken is not None:
            raise self._broken
        assert self._failure is not None
        self._failure_raised = True
        raise self._failure

    async def _fail_waits(self, failure: BaseException) -> None:
        self._failures, self._failure, self._failure_raised = self._failures + 1, failure, False
        async with self._changed:
            self._changed.notify_all()

    async def _read(self) -> None:
        try:
            while True:
                frame = await self._connection.receive(PING_AFTER_S)  # a refused CURVE key: every waiter hears why
                if frame is not None:
                    try:
                        msg = protocol.decode_reply(frame)
                    except ProtocolError as exc:  # not one of the protocol: whatever waits hears it
                        await self._fail_waits(exc)
                        continue
                    await self._take(msg)
                    continue
                now = time.monotonic()
                if not self._waiting:
                    self._alive.last_heard = now  # quiet time counts only while someone waits
                elif self._alive.dead(now):
                    how = "was restarted (attach again with wait)" if self._alive.replaced else "stopped answering"
                    await self._fail_waits(RuntimeUnavailable(f"the krex runtime at {self.endpoint} {how}"))
                elif self._alive.quiet(now):
                    ping = protocol.request("hello", HELLO)
                    await self._send_frame(protocol.encode(ping))
                    self._alive.ping_id, self._alive.ping_sent = ping["id"], now
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a refused handshake (or a fault here): every call from now on hears it
            self._broken = exc
            async with self._changed:
                self._changed.notify_all()

    async def _take(self, msg: dict[str, Any]) -> None:
        """Route one message; ask again for what the runtime dropped (inbox.py)."""
        self._inbox.note_dropped(msg)
        if not self._alive.heard(msg, time.monotonic()) and self._inbox.feed(msg) is None:
            self._inbox.unclaimed.append(msg)
        for request in self._inbox.ask_again():
            await self._send_frame(protocol.encode(request))
        async with self._changed:
            self._changed.notify_all()


def telemetry_from_hello(endpoint: str, hello: Mapping[str, Any]) -> str:
    """The telemetry endpoint a runtime names to a tcp client (runtime.telemetry_tcp)."""
    found = hello.get("telemetry") if isinstance(hello, Mapping) else None
    if not isinstance(found, str) or not found.startswith("tcp://"):
        raise RuntimeUnavailable(
            f"the runtime at {endpoint} serves no tcp telemetry endpoint (runtime.telemetry_tcp); "
            f"name one with telemetry= or {TELEMETRY_ENV}"
        )
    return found


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return os.fspath(value) if value is not None else None


def _verb_wait(verb: str, default: float) -> float:
    """The client's timeout, unless the verb takes longer to answer by its
    nature (a lease waits for its region): then its table's wait. Every other
    verb waits the client's timeout, shorter or longer than the usual reply wait."""
    known = VERBS.get(verb)
    return max(default, known.wait_s) if known is not None and known.wait_s > REPLY_WAIT_S else default
