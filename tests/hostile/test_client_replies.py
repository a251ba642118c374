"""The Python client against a runtime that answers with malformed messages:
a fake runtime (a real zmq ROUTER socket on ipc) sends replies and pushes of
the wrong shape or types. Whatever it sends, the client raises its own
ProtocolError (bad_message), never a KeyError, AttributeError or TypeError,
and no Result holds a field of the wrong type; a reply naming another
request does not make a call wait past its timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from runtime_helpers import Answer, push, reply

from krex_runtime.api import AsyncClient, Client, ProtocolError, RuntimeUnavailable, aio
from krex_runtime.wire.protocol.verbs import LEASE_WAIT_S

RESULT = {"id": "c-1", "state": "finished", "exit_code": 0, "signal": None, "reason": "", "gpu": 0, "label": "",
          "mode": "process", "submitted_at": 1.0, "started_at": 1.0, "finished_at": 2.0, "queue_s": 0.0,
          "run_s": 1.0, "total_s": 1.0, "regions": [], "region_count": 0, "unprotected_timings": 0}
STATUS = {"node": "n", "policy": "krex", "pid": 1, "uptime_s": 1.0, "paused": False, "stopping": False,
          "queued": 0, "totals": {}, "gpus": [], "commands": []}


@pytest.fixture
def fake(fake_runtime: Callable[..., str]) -> Callable[..., str]:
    return fake_runtime


def _submit_then(*messages: Callable[[dict[str, Any]], Any]) -> Answer:
    """A submit accepted as command c-1, then these pushes; other requests answered {}."""
    def answer(req: dict[str, Any]) -> list[Any]:
        if req["type"] != "submit":
            return [reply(req)]
        return [reply(req, {"id": "c-1", "state": "queued"}), *(m(req) for m in messages)]
    return answer


def _on(verb: str, *messages: Callable[[dict[str, Any]], Any]) -> Answer:
    return lambda req: [m(req) for m in messages] if req["type"] == verb else [reply(req)]


# (what the client does, what the fake runtime answers, what the error says)
CASES: list[tuple[str, Answer, str]] = [
    ("status", _on("status", lambda r: reply(r, [1, 2])), "status is list"),
    ("status", _on("status", lambda r: reply(r, {k: v for k, v in STATUS.items() if k != "node"})), "status has no node"),
    ("status", _on("status", lambda r: reply(r, {**STATUS, "pid": "one"})), "status.pid must be an integer"),
    ("status", _on("status", lambda r: reply(r, {**STATUS, "gpus": [{"index": 0}]})), "status.gpus[] has no name"),
    ("status", _on("status", lambda r: reply(r, ok="yes")), "'ok' is not true or false"),
    ("status", _on("status", lambda r: reply(r, ok=False, error="boom")), "'error' is not {code, reason} strings"),
    ("status", _on("status", lambda r: reply(r, ok=False)), "'error' is not {code, reason} strings"),
    ("status", _on("status", lambda r: b"not json"), "not JSON"),
    ("status", _on("status", lambda r: b"[1]"), "something other than a JSON object"),
    ("status", _on("status", lambda r: reply(r, STATUS, type=7)), "'type' is not a string"),
    ("status", _on("status", lambda r: reply(r, STATUS, dropped="many")), "'dropped' is not a count"),
    ("cancel", _on("cancel", lambda r: reply(r, {"id": "c-1"})), "the reply to cancel names no state"),
    ("cancel", _on("cancel", lambda r: reply(r, "cancelled")), "the reply to cancel names no state"),
    ("run", _on("submit", lambda r: reply(r, {"id": 5})), "names no command id"),
    ("run", _on("submit", lambda r: reply(r, [])), "names no command id"),
    ("run", _submit_then(lambda r: push(r, "result", {**RESULT, "exit_code": "zero"})),
     "result.exit_code must be an integer, not str 'zero'"),
    ("run", _submit_then(lambda r: push(r, "result", {**RESULT, "state": None})), "result has no state"),
    ("run", _submit_then(lambda r: push(r, "result", {**RESULT, "regions": [{"region": "x"}]})),
     "region.region must be an integer"),
    ("run", _submit_then(lambda r: push(r, "result", {**RESULT, "output_lost": {"stdout": "1"}})),
     "result.output_lost must be an object of integers"),
    ("run", _submit_then(lambda r: push(r, "result", ["x"])), "needs a string 're' and an object 'body'"),
    ("run", _submit_then(lambda r: push(r, "output", {"stream": "stdout", "data": 5})),
     "an output push needs a stream"),
    ("run", _submit_then(lambda r: push(r, "output", {"stream": "fd3", "data": "x"})),
     "an output push needs a stream"),
]


def _act(client: Client, action: str) -> Any:
    if action == "status":
        return client.status()
    if action == "cancel":
        return client.cancel("c-1")
    return client.run(["true"])


async def _act_async(client: AsyncClient, action: str) -> Any:
    if action == "status":
        return await client.status()
    if action == "cancel":
        return await client.cancel("c-1")
    return await client.run(["true"])


@pytest.mark.parametrize("action, answer, message", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_a_malformed_reply_is_a_protocol_error(fake: Callable[..., str], action: str, answer: Answer,
                                               message: str) -> None:
    endpoint = fake(answer)
    with Client(endpoint, timeout=20) as client, pytest.raises(ProtocolError) as err:
        _act(client, action)
    assert err.value.code == "bad_message", err.value
    assert message in str(err.value), err.value

    async def main() -> None:
        async with AsyncClient(endpoint, timeout=20) as client:
            with pytest.raises(ProtocolError) as err:
                await _act_async(client, action)
            assert message in str(err.value), err.value

    asyncio.run(main())


def test_a_well_formed_fake_result_still_reads(fake: Callable[..., str]) -> None:
    """The same fake runtime, answering properly: the checks refuse only what is wrong."""
    endpoint = fake(_submit_then(lambda r: push(r, "output", {"stream": "stdout", "data": "hi\n"}),
                                 lambda r: push(r, "result", RESULT)))
    with Client(endpoint, timeout=20) as client:
        result = client.run(["true"])
    assert (result.id, result.exit_code, result.stdout, result.ok) == ("c-1", 0, "hi\n", True)


class CountingClock:
    """A monotonic clock that moves 10 ms each time it is read: how long a
    client waited is then counted in its own reads of the clock, whatever
    the machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        self.now += 0.01
        return self.now


def test_replies_to_other_requests_do_not_stretch_a_call_past_its_timeout(fake: Callable[..., str]) -> None:
    """A `status` under timeout=2 waited 10 s (the verb table's usual wait won
    over the client's), and no reply it could not use may restart its wait:
    the runtime here answers every request, pings too, with replies naming
    other requests, as fast as the client reads them. The client's waits are
    timed by its event loop, whose clock here is the counting one."""

    def elsewhere(req: dict[str, Any]) -> list[Any]:
        return [reply({"id": f"other-{i}"}, {}) for i in range(200)]

    endpoint = fake(elsewhere, pings_too=True)
    clock = CountingClock()

    async def status_under_timeout() -> float:
        async with AsyncClient(endpoint, timeout=2) as client:
            started = clock.now
            with pytest.raises(RuntimeUnavailable, match="no reply"):
                await client.call("status")
            return clock.now - started

    loop = asyncio.new_event_loop()
    loop.time = clock.monotonic  # type: ignore[method-assign]
    try:
        waited = loop.run_until_complete(status_under_timeout())
    finally:
        loop.close()
    assert 2 <= waited < 3, f"the call gave up after {waited:.2f} s of its clock, under timeout=2"
    # The blocking client waits in the same calls, on its own loop: it gives up as well.
    with Client(endpoint, timeout=2) as client, pytest.raises(RuntimeUnavailable, match="no reply"):
        client.call("status")
    # Only a verb that waits by its nature (a lease, for its region) waits longer than the client's timeout.
    assert aio._verb_wait("status", 2) == 2 and aio._verb_wait("cancel", 2) == 2
    assert aio._verb_wait("lease", 2) == LEASE_WAIT_S
