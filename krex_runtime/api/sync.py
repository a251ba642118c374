"""The blocking client: `Client` and the `Handle` of a submitted command.

One Client holds one control connection; the handles of its commands share
it, and whichever waits reads for all of them. Use a Client from one thread
(or one per thread): ZeroMQ sockets are not shared between threads.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import zmq

from krex_runtime.api import inbox as core
from krex_runtime.api.inbox import Follow, Inbox, Liveness, OutputCallback
from krex_runtime.api.results import Command, Event, NodeStatus, Result
from krex_runtime.wire import endpoints, protocol
from krex_runtime.wire.control_client import ControlClient, CurveKeys, RuntimeUnavailable, use_curve
from krex_runtime.wire.verbs import REPLY_WAIT_S, VERBS

TELEMETRY_ENV = "KREX_TELEMETRY"  # the telemetry endpoint of a tcp runtime


class Handle:
    """A submitted command: wait for it, cancel it, or look at its result."""

    def __init__(self, client: Client, follow: Follow) -> None:
        self._client = client
        self._follow = follow
        assert follow.command_id is not None
        self.id: str = follow.command_id

    def done(self) -> bool:
        self._client._drain()
        return self._follow.done

    def result(self) -> Result | None:
        """Its Result if it has ended (reading what already arrived), else None."""
        return self._follow.result() if self.done() else None

    def wait(self, timeout: float | None = None) -> Result:
        """Block until it ends; TimeoutError after `timeout` seconds (it keeps
        running: cancel it if you gave up on it)."""
        self._client._pump_until(lambda: self._follow.done, timeout, f"command {self.id}")
        return self._follow.result()

    def cancel(self) -> str:
        """Cancel it; returns its state after the cancel (`cancelled`, or how it had already ended)."""
        return self._client.cancel(self.id)

    def __repr__(self) -> str:
        return f"Handle({self.id!r}, done={self._follow.done})"


class Client:
    """A client of one runtime's control socket.

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
        self._keys = CurveKeys(_path(curve_client_key), _path(curve_server_key))
        self._conn = ControlClient(endpoint, timeout_s=timeout, keys=self._keys)
        self.endpoint = self._conn.endpoint
        self._telemetry = telemetry
        self._timeout = timeout
        self._inbox = Inbox()
        self._alive = Liveness(time.monotonic())

    # --- lifetime -------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- commands -------------------------------------------------------------

    def submit(
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
    ) -> Handle:
        """Queue a command; returns once the runtime accepted it (RequestFailed if refused).

        gpus: a set of GPUs for one command: how many (2, placed where that many
            have a free slot) or which ([0, 1]); its regions cover them all.
        timeout: its wall-time limit in seconds (state `timeout`, exit status 124).
        env: its whole environment (default: this process's, as `krex` sends).
        cwd: its working folder (default: this process's).
        on_output(stream, text): called with its output as it arrives.
        """
        body = core.submit_body(
            argv, gpu=gpu, gpus=gpus, mode=mode, timeout=timeout, env=env, cwd=cwd, label=label,
            auto_region=auto_region, auto_region_entries=auto_region_entries, share=share, lease=lease,
            node_labels=node_labels, gpu_model=gpu_model, retries=retries,
        )
        return self._follow("submit", body, on_output)

    def attach(self, command_id: str, on_output: OutputCallback | None = None) -> Handle:
        """Follow a command submitted earlier (by anyone): its output so far,
        then the rest, then its Result (a finished one's at once)."""
        return self._follow("wait", {"id": command_id, "attach": True}, on_output)

    def _follow(self, verb: str, body: dict[str, Any], on_output: OutputCallback | None) -> Handle:
        """Send a request that attaches to a command; its Handle once the runtime accepted it."""
        request_id = self._conn.send(verb, body)
        follow = self._inbox.follow(request_id, on_output)
        try:
            self._pump_until(lambda: follow.replied, self._timeout, f"the reply to {verb}", reply=True)
        except BaseException:
            self._inbox.forget(request_id)
            raise
        if follow.error is not None:
            self._inbox.forget(request_id)
            raise follow.error
        return Handle(self, follow)

    def run(self, argv: Sequence[str], **options: Any) -> Result:
        """Submit a command and wait for its Result (the options of `submit`)."""
        return self.submit(argv, **options).wait()

    def map(
        self, commands: Iterable[Command | Sequence[str]], *, max_in_flight: int = 8, **common: Any
    ) -> Iterator[Result]:
        """Run many commands, at most `max_in_flight` submitted at a time, and
        yield each Result as its command ends (completion order: match them by
        `id` or `label`). Each item is an argv or a Command; `common` options
        apply to all (a Command's own win). Leaving the loop early cancels the
        commands still in flight."""
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        todo = iter(commands)
        in_flight: list[Handle] = []
        exhausted = False
        try:
            while True:
                while not exhausted and len(in_flight) < max_in_flight:
                    item = next(todo, None)
                    if item is None:
                        exhausted = True
                        break
                    argv, options = core.options_of(item, common)
                    in_flight.append(self.submit(argv, **options))
                if not in_flight:
                    return
                self._pump_until(lambda: any(h._follow.done for h in in_flight), None, "a command to end")
                for h in [h for h in in_flight if h._follow.done]:
                    in_flight.remove(h)
                    yield h._follow.result()
        finally:
            self._cancel_all([h.id for h in in_flight if not h._follow.done])

    def cancel(self, command_id: str) -> str:
        """Cancel a queued or running command; its state after the cancel."""
        return core.state_of(self.call("cancel", {"id": command_id}), "cancel")

    def _cancel_all(self, command_ids: list[str]) -> None:
        """Cancel many at once (each reply waits for its command's end, so
        they are sent together); best effort: the runtime may be gone."""
        pending: set[str] = set()
        try:
            for command_id in command_ids:
                request_id = self._conn.send("cancel", {"id": command_id})
                self._inbox.expect(request_id)
                pending.add(request_id)
            self._pump_until(lambda: pending <= set(self._inbox.replies), VERBS["cancel"].wait_s, "cancel replies")
        except Exception:
            pass  # the runtime may be gone: nothing more to do for these commands
        finally:
            for request_id in pending:
                self._inbox.take_reply(request_id)
                self._inbox.calls.discard(request_id)

    # --- the node -------------------------------------------------------------

    def status(self) -> NodeStatus:
        return NodeStatus.from_record(self.call("status"))

    def call(self, verb: str, body: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Any verb of the protocol (docs/protocol.md): its reply body, or RequestFailed."""
        request_id = self._conn.send(verb, dict(body or {}))
        self._inbox.expect(request_id)
        wait_s = timeout if timeout is not None else _verb_wait(verb, self._timeout)
        try:
            self._pump_until(lambda: request_id in self._inbox.replies, wait_s, f"the reply to {verb}", reply=True)
        finally:
            msg = self._inbox.take_reply(request_id)
            self._inbox.calls.discard(request_id)
        assert msg is not None
        return core.reply_body(msg)

    def events(self, *, idle_timeout: float | None = None) -> Iterator[Event]:
        """The runtime's events as they happen (the telemetry PUB socket).
        Ends after `idle_timeout` seconds without one (None: never)."""
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            endpoint = self._telemetry_endpoint()
            use_curve(sock, endpoint, self._keys)
            sock.setsockopt(zmq.SUBSCRIBE, protocol.TOPIC_EVENT)
            sock.connect(endpoint)
            while True:
                if not sock.poll(int(idle_timeout * 1000) if idle_timeout is not None else -1):
                    return
                frames = sock.recv_multipart()
                if len(frames) == 2 and frames[0] == protocol.TOPIC_EVENT:
                    yield Event.from_wire(protocol.load_json(frames[1]))
        finally:
            sock.close(linger=0)

    def _telemetry_endpoint(self) -> str:
        found = self._telemetry or endpoints.client_telemetry(self.endpoint) or os.environ.get(TELEMETRY_ENV, "")
        return found or telemetry_from_hello(self.endpoint, self.call("hello", {"client": "krex-api"}))

    # --- reading the socket ---------------------------------------------------

    def _drain(self) -> None:
        """Take what has already arrived, without waiting."""
        while True:
            msg = self._conn.receive(0)
            if msg is None:
                return
            self._take(msg)

    def _take(self, msg: dict[str, Any]) -> None:
        self._inbox.note_dropped(msg)
        if not self._alive.heard(msg, time.monotonic()):
            self._inbox.feed(msg)
        for request in self._inbox.ask_again():  # the runtime dropped messages to us (inbox.py)
            self._conn.send_raw(protocol.encode(request))

    def _pump_until(self, done: Callable[[], bool], timeout: float | None, what: str, reply: bool = False) -> None:
        """Read and route messages until `done()`; after `timeout`, TimeoutError
        (or, awaiting a `reply`, RuntimeUnavailable); RuntimeUnavailable when
        the runtime goes quiet and misses a ping."""
        deadline = time.monotonic() + timeout if timeout is not None else None
        self._alive.last_heard = time.monotonic()
        while not done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if reply:
                    raise RuntimeUnavailable(f"no reply from the krex runtime at {self.endpoint} ({what})")
                raise TimeoutError(f"timed out waiting for {what}")
            wait_s = core.PING_AFTER_S if deadline is None else min(core.PING_AFTER_S, deadline - now)
            msg = self._conn.receive(max(0.0, wait_s))
            now = time.monotonic()
            if msg is not None:
                self._take(msg)
                continue
            if self._alive.dead(now):
                how = "was restarted (attach again with wait)" if self._alive.replaced else "stopped answering"
                raise RuntimeUnavailable(f"the krex runtime at {self.endpoint} {how} ({what})")
            if self._alive.quiet(now):
                self._alive.ping_id, self._alive.ping_sent = self._conn.send("hello", {"client": "krex-api"}), now


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
