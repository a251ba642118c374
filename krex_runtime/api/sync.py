"""The blocking client: `Client` and the `Handle` of a submitted command,
a thin layer over the asyncio client (aio.py), which does all the work.

Each Client runs its AsyncClient on an event loop of its own, on a thread of
its own (as jupyter_client's blocking client does), and each call waits for
its coroutine there. So a Client works in any thread, in a program that runs
an event loop of its own too (a notebook), and its calls behave as the
AsyncClient's do. A command's `on_output` is called on that thread.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from krex_runtime.api.aio import AsyncClient, AsyncHandle
from krex_runtime.api.options import Command, OutputCallback
from krex_runtime.api.refused import RequestFailed
from krex_runtime.api.results import Event, NodeStatus, Result
from krex_runtime.wire.evaluation import Evaluation

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class _LoopThread:
    """An event loop run by a daemon thread of its own; `run` hands it a
    coroutine and waits for its end."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="krex-client", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def usable(self) -> bool:
        """Open, and asked from another thread (its own would wait on itself)."""
        return not self.loop.is_closed() and threading.current_thread() is not self._thread

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and return what it returns (or raise what it
        raises). Interrupted (Ctrl-C), the coroutine is cancelled, and its
        clean-up (a map's cancels) ends before the interruption goes on."""
        if not self.usable():
            coro.close()
            if self.loop.is_closed():
                raise RuntimeError("this Client is closed")
            raise RuntimeError("a Client was called from its own thread (an on_output callback, or the items "
                               "given to map): use the AsyncClient there, or another Client")
        ended = threading.Event()
        started: list[asyncio.Task[T]] = []

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda _: ended.set())
            started.append(task)

        self.loop.call_soon_threadsafe(start)
        try:
            ended.wait()
        except BaseException:
            self.loop.call_soon_threadsafe(lambda: started[0].cancel())  # after start(): callbacks run in order
            ended.wait()
            raise
        return started[0].result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        if threading.current_thread() is self._thread:
            self.loop.stop()
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


def _close(loop: _LoopThread, client: AsyncClient) -> None:
    """Close the client on its loop, then end the loop (at close(), or when the Client is collected)."""
    if loop.usable():
        loop.run(client.close())
    loop.stop()


def _blocking(model: Callable[..., Any]) -> Callable[[F], F]:
    """Give a blocking call the parameters of its asyncio twin, which it passes
    on as they are (help(), inspect and editors show them)."""

    def mark(fn: F) -> F:
        returns = inspect.signature(fn).return_annotation
        fn.__signature__ = inspect.signature(model).replace(return_annotation=returns)  # type: ignore[attr-defined]
        return fn

    return mark


async def _open(**connection: Any) -> AsyncClient:
    return AsyncClient(**connection)  # on its loop: its sockets and its reader live there


async def _value(fn: Callable[[], T]) -> T:
    return fn()


_END: Any = object()


async def _next(items: AsyncIterator[T]) -> T:
    try:
        return await items.__anext__()
    except StopAsyncIteration:
        end: T = _END
        return end


async def _aclose(items: AsyncIterator[Any]) -> None:
    await items.aclose()  # type: ignore[attr-defined]


class Handle:
    """A submitted command: wait for it, cancel it, or look at its result."""

    def __init__(self, client: Client, handle: AsyncHandle) -> None:
        self._client = client
        self._handle = handle
        self.id: str = handle.id

    def done(self) -> bool:
        return self._handle.done()  # one flag, set on the loop's thread

    def result(self) -> Result | None:
        """Its Result if it has ended, else None."""
        return self._client._loop.run(_value(self._handle.result))

    def wait(self, timeout: float | None = None) -> Result:
        """Block until it ends; TimeoutError after `timeout` seconds (it keeps
        running: cancel it if you gave up on it)."""
        return self._client._loop.run(self._handle.wait(timeout))

    def cancel(self) -> str:
        """Cancel it; returns its state after the cancel (`cancelled`, or how it had already ended)."""
        return self._client._loop.run(self._handle.cancel())

    def __repr__(self) -> str:
        return f"Handle({self.id!r}, done={self._handle.done()})"


class Client:
    """The blocking client of one runtime's control socket: the AsyncClient's
    calls (same arguments), each waited for. Use it as a context manager, or
    call `close()`."""

    @_blocking(AsyncClient.__init__)
    def __init__(self, endpoint: str | None = None, **connection: Any) -> None:
        self._loop = _LoopThread()
        try:
            self._async = self._loop.run(_open(endpoint=endpoint, **connection))
        except BaseException:
            self._loop.stop()
            raise
        self.endpoint = self._async.endpoint
        # The loop and its thread end with the Client, closed or not (not at exit: a daemon thread just stops).
        self._closer = weakref.finalize(self, _close, self._loop, self._async)
        self._closer.atexit = False

    # --- lifetime -------------------------------------------------------------

    def close(self) -> None:
        self._closer()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- commands -------------------------------------------------------------

    @_blocking(AsyncClient.submit)
    def submit(self, argv: Sequence[str], **options: Any) -> Handle:
        """Queue a command and follow it; returns once the runtime accepted it
        (RequestFailed if refused). The options: `SubmitOptions` (docs/api.md)."""
        return Handle(self, self._loop.run(self._async.submit(argv, **options)))

    @_blocking(AsyncClient.enqueue)
    def enqueue(self, argv: Sequence[str], **options: Any) -> dict[str, Any]:
        """Queue a command that this client does not follow (`krex submit`):
        the runtime's reply, `{"id", "state"}`; `attach(id)` follows it later."""
        return self._loop.run(self._async.enqueue(argv, **options))

    def attach(self, command_id: str, on_output: OutputCallback | None = None) -> Handle:
        """Follow a command submitted earlier (by anyone): its output so far,
        then the rest, then its Result (a finished one's at once)."""
        return Handle(self, self._loop.run(self._async.attach(command_id, on_output)))

    @_blocking(AsyncClient.run)
    def run(self, argv: Sequence[str], **options: Any) -> Result:
        """Submit a command and wait for its Result (the options of `submit`)."""
        return self._loop.run(self._async.run(argv, **options))

    @_blocking(AsyncClient.map)
    def map(self, commands: Iterable[Command | Sequence[str]], **options: Any) -> Iterator[Result]:
        """`AsyncClient.map`'s Results, as its commands end; leaving the loop
        early cancels the commands still in flight."""
        return self._iterate(self._async.map(commands, **options))

    @_blocking(AsyncClient.evaluate)
    def evaluate(self, problem: Any, candidate: Any, **options: Any) -> Evaluation:
        """Evaluate one candidate against its problem (one command): its Evaluation."""
        return self._loop.run(self._async.evaluate(problem, candidate, **options))

    @_blocking(AsyncClient.evaluate_many)
    def evaluate_many(self, pairs: Iterable[Any], **options: Any) -> Iterator[Evaluation]:
        """`AsyncClient.evaluate_many`'s Evaluations, as their commands end; leaving
        the loop early cancels the commands still in flight."""
        return self._iterate(self._async.evaluate_many(pairs, **options))

    def cancel(self, command_id: str) -> str:
        """Cancel a queued or running command; its state after the cancel."""
        return self._loop.run(self._async.cancel(command_id))

    @_blocking(AsyncClient.cancel_many)
    def cancel_many(self, command_ids: Iterable[str], **options: Any) -> dict[str, str | RequestFailed]:
        """Cancel several commands at once: each id's state after the cancel,
        or the refusal of that id alone (`not_found`)."""
        return self._loop.run(self._async.cancel_many(command_ids, **options))

    # --- the node -------------------------------------------------------------

    def status(self) -> NodeStatus:
        return self._loop.run(self._async.status())

    def show(self, command_id: str) -> Result:
        """One command as it is now, without waiting for its end (its `argv` too)."""
        return self._loop.run(self._async.show(command_id))

    def call(self, verb: str, body: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Any verb of the protocol (docs/protocol.md): its reply body, or RequestFailed."""
        return self._loop.run(self._async.call(verb, body, timeout))

    # --- raw messages ---------------------------------------------------------

    def send(self, verb: str, body: Mapping[str, Any] | None = None) -> str:
        """Send a request without waiting for its reply: its id (the reply: `receive`)."""
        return self._loop.run(self._async.send(verb, body))

    def send_raw(self, frame: bytes) -> None:
        """Put bytes on the wire as they are (tests of malformed input)."""
        self._loop.run(self._async.send_raw(frame))

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next message that answers no call of this client, or None after `timeout` seconds."""
        return self._loop.run(self._async.receive(timeout))

    def events(self, *, idle_timeout: float | None = None) -> Iterator[Event]:
        """The runtime's events as they happen (the telemetry PUB socket).
        Ends after `idle_timeout` seconds without one (None: never)."""
        return self._iterate(self._async.events(idle_timeout=idle_timeout))

    def _iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """One of the AsyncClient's iterators, blocking. Leaving it early closes
        that one (a map cancels what it has in flight); one dropped on the
        loop's own thread is closed there by asyncio when it is collected."""
        try:
            while (item := self._loop.run(_next(items))) is not _END:
                yield item
        finally:
            if self._loop.usable():
                self._loop.run(_aclose(items))
