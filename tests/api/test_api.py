"""The Python API (krex_runtime.api) against a real runtime on simulated GPUs,
over ipc and over tcp + CURVE: one runtime serves both, for the whole module."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, TENANTS, regions_config, stop_and_check

from krex_runtime import AsyncClient, Client
from krex_runtime.api import Command, RequestFailed, Result, RuntimeUnavailable
from krex_runtime.service import curve
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until

SLEEP = [PY, "-c", "import time; time.sleep(60)"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("api")
    keys, clients = root / "keys", root / "clients"
    clients.mkdir()
    server_public, server_secret = curve.create_key_pair(keys, "server")
    agent_public, agent_secret = curve.create_key_pair(keys, "agent")
    (clients / agent_public.name).write_bytes(agent_public.read_bytes())
    control, telemetry = f"tcp://127.0.0.1:{_free_port()}", f"tcp://127.0.0.1:{_free_port()}"
    before = hygiene.baseline()
    rt = Runtime(
        root / "rt", policy="krex", sim=1, slots=8, extra_config=regions_config(),
        runtime_extra=(
            f'control_tcp = "{control}"\ntelemetry_tcp = "{telemetry}"\n'
            f'curve_server_key = "{server_secret}"\ncurve_clients = "{clients}"'
        ),
    ).start()
    try:
        yield {
            "rt": rt,
            "ipc": {"endpoint": f"ipc://{rt.run_dir / 'control.sock'}"},
            "tcp": {"endpoint": control, "telemetry": telemetry,
                    "curve_client_key": str(agent_secret), "curve_server_key": str(server_public)},
        }
    finally:
        stop_and_check(rt)
    assert not hygiene.leftovers(rt.run_dir, rt.lock_dir, before)


@pytest.fixture(params=["ipc", "tcp"])
def where(request: pytest.FixtureRequest, node: dict[str, Any]) -> dict[str, Any]:
    return node[request.param]


def test_run_gives_output_exit_code_and_regions(where: dict[str, Any]) -> None:
    with Client(**where) as krex:
        result = krex.run(
            [PY, str(TENANTS / "regions.py"), "--regions", "2", "--kernel-us", "200", "--repeats", "2"], label="cand-1"
        )
        failed = krex.run([PY, "-c", "import sys; print('to err', file=sys.stderr); sys.exit(3)"])
    assert isinstance(result, Result) and result.ok and result.exit_status == 0
    assert result.label == "cand-1" and result.state == "finished"
    assert [json.loads(line)["region"] for line in result.stdout.splitlines()] == [0, 1]
    assert result.region_count == 2 and len(result.regions) == 2
    for region in result.regions:
        assert region.gpu == 0 and region.kind == "region" and region.reason == "released"
        assert region.enter_s is not None and region.hold_s is not None and region.hold_s >= 0
        assert region.verdict == "verified" and region.verdict_reasons[0].startswith("gate: ")
    assert result.unprotected_timings == 1  # its warm-up times a kernel with events before any region
    assert failed.exit_code == 3 and failed.exit_status == 3 and failed.stderr == "to err\n" and not failed.ok


def test_inherits_cwd_and_env_like_the_cli(where: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KREX_API_PROBE", "inherited")
    with Client(**where) as krex:
        inherited = krex.run(["sh", "-c", "pwd; echo $KREX_API_PROBE"])
        given = krex.run(["sh", "-c", "pwd; echo ${KREX_API_PROBE:-unset}"], cwd="/", env={"PATH": os.environ["PATH"]})
    assert inherited.stdout.split() == [str(tmp_path), "inherited"]
    assert given.stdout.split() == ["/", "unset"]


def test_signal_and_timeout_exit_statuses(where: dict[str, Any]) -> None:
    with Client(**where) as krex:
        killed = krex.run(["sh", "-c", "kill -9 $$"])
        late = krex.run(SLEEP, timeout=0.5)
    assert killed.signal == 9 and killed.exit_status == 137
    assert late.state == "timeout" and late.exit_status == 124


def test_submit_wait_timeout_and_cancel(where: dict[str, Any]) -> None:
    with Client(**where) as krex:
        handle = krex.submit(SLEEP)
        assert handle.result() is None and not handle.done()
        with pytest.raises(TimeoutError):
            handle.wait(timeout=0.3)
        assert handle.id in {c.id for c in krex.status().commands}
        assert handle.cancel() == "cancelled"
        result = handle.wait(timeout=30)
    assert result.state == "cancelled" and result.id == handle.id


def test_map_yields_every_result_and_cancels_what_is_left(where: dict[str, Any]) -> None:
    commands = [Command(["sh", "-c", f"echo {i}"], label=f"c{i}") for i in range(5)] + [["sh", "-c", "exit 7"]]
    with Client(**where) as krex:
        results = list(krex.map(commands, max_in_flight=2))
        assert sorted(r.label for r in results) == ["", "c0", "c1", "c2", "c3", "c4"]
        assert {r.label: r.stdout for r in results if r.label} == {f"c{i}": f"{i}\n" for i in range(5)}
        assert [r.exit_code for r in results if not r.label] == [7]
        # Leaving the loop early cancels the commands still in flight.
        stream = krex.map([["true"], SLEEP, SLEEP], max_in_flight=3)
        first = next(stream)
        stream.close()
        assert first.ok
        wait_until(lambda: not krex.status().commands, 30, "the left commands to be cancelled")
        assert krex.status().totals["cancelled"] >= 2


def test_refusals_say_why(where: dict[str, Any]) -> None:
    with Client(**where) as krex:
        with pytest.raises(RequestFailed) as bad_entry:
            krex.run(["true"], auto_region=True, auto_region_entries=["no-colon"])
        with pytest.raises(RequestFailed) as bad_mode:
            krex.run(["true"], mode="teleported")
        with pytest.raises(RequestFailed) as unknown:
            krex.attach("no-such-command")
    assert bad_entry.value.code == "bad_request" and "no-colon" in bad_entry.value.reason
    assert bad_mode.value.code == "bad_request" and "mode" in bad_mode.value.reason
    assert unknown.value.code == "not_found"
    with pytest.raises(ValueError):
        Client(**where).submit([])


def test_events_stream_the_command_it_ran(where: dict[str, Any]) -> None:
    with Client(**where) as krex:
        events = krex.events(idle_timeout=10)
        first = next(events)  # subscribed (the runtime samples telemetry every 0.5 s)
        result = krex.run(["true"])
        mine = next(e for e in events if e.type == "command_finished" and e.fields["id"] == result.id)
    assert first.seq > 0 and first.type
    assert mine.fields["state"] == "finished" and mine.seq > first.seq


def test_a_tcp_client_finds_the_telemetry_endpoint_in_hello(node: dict[str, Any]) -> None:
    tcp = {k: v for k, v in node["tcp"].items() if k != "telemetry"}
    with Client(**tcp) as krex:
        assert krex.call("hello")["telemetry"] == node["tcp"]["telemetry"]
        assert next(krex.events(idle_timeout=10)).seq > 0


def test_async_client_run_map_cancel_timeout(where: dict[str, Any]) -> None:
    async def scenario() -> None:
        async with AsyncClient(**where) as krex:
            result = await krex.run([PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200"])
            assert result.ok and result.region_count == 1 and result.regions[0].hold_s is not None
            assert '"region": 0' in result.stdout
            labels = [r.label async for r in krex.map([Command(["true"], label=f"a{i}") for i in range(4)], max_in_flight=2)]
            assert sorted(labels) == ["a0", "a1", "a2", "a3"]
            handle = await krex.submit(SLEEP)
            with pytest.raises(TimeoutError):
                await handle.wait(timeout=0.3)
            assert await handle.cancel() == "cancelled"
            assert (await handle.wait(timeout=30)).state == "cancelled"
            late = await krex.run(SLEEP, timeout=0.5)
            assert late.state == "timeout" and late.exit_status == 124
            both = await asyncio.gather(krex.run(["echo", "x"]), krex.run(["echo", "y"]))
            assert [r.stdout for r in both] == ["x\n", "y\n"]
            assert (await krex.status()).policy == "krex"

    asyncio.run(scenario())


def test_async_events(node: dict[str, Any]) -> None:
    async def scenario() -> bool:
        async with AsyncClient(**node["ipc"]) as krex:
            events = krex.events(idle_timeout=10)
            await events.__anext__()  # subscribed
            result = await krex.run(["true"])
            n = 0
            async for e in events:
                n += 1
                if e.type == "command_finished" and e.fields["id"] == result.id:
                    return True
                if n > 500:
                    return False
            return False

    assert asyncio.run(scenario())


def test_package_stays_cheap_until_the_api_is_named() -> None:
    code = (
        "import sys, krex_runtime, krex_runtime.client\n"
        "assert not any(m.startswith(('zmq', 'krex_runtime.api', 'krex_runtime.wire')) for m in sys.modules), sys.modules\n"
        "from krex_runtime import Client, AsyncClient\n"
        "assert Client.__module__ == 'krex_runtime.api.sync' and 'zmq' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_command_regions_are_folded_kept_bounded_and_counted() -> None:
    """The result's regions come from the one reducer: grant and release of
    each, the first REGIONS_KEPT kept, all counted."""
    from krex_runtime.wire.state import apply as node_state
    from krex_runtime.wire.state.model import REGIONS_KEPT

    s = node_state.NodeState()
    seq = iter(range(1, 10_000))

    def apply(**e: Any) -> None:
        node_state.apply(s, {"seq": next(seq), "t": 1.0, **e})

    apply(type="runtime_started", node="n", policy="krex", pid=1,
          gpus=[{"index": 0, "uuid": "u", "name": "g", "memory_total": 1, "simulated": True, "slots": 1}])
    apply(type="command_queued", id="c1", argv=["x"])
    apply(type="command_started", id="c1", gpu=0, pid=2, tenant_id=1)
    for n in range(REGIONS_KEPT + 3):
        apply(type="region_requested", gpu=0, region=n, kind="region", tenant_id=1, command_id="c1")
        apply(type="region_granted", gpu=0, region=n, kind="region", tenant_id=1, command_id="c1", enter_s=0.001,
              flags=["clock"] if n == 0 else [])
        apply(type="region_released", gpu=0, region=n, reason="released", hold_s=0.5, verdict="verified")
    cmd = s.commands["c1"]
    assert cmd.region_count == REGIONS_KEPT + 3 and len(cmd.regions) == REGIONS_KEPT
    first = Result.from_record({"id": "c1", "state": "finished", "regions": cmd.regions}).regions[0]
    assert first.flags == ("clock",) and first.hold_s == 0.5 and first.reason == "released" and first.verdict == "verified"
    restored = node_state.from_snapshot(node_state.to_snapshot(s))
    assert restored.commands["c1"].regions == cmd.regions


def test_a_runtime_that_stops_answering_is_noticed(node: dict[str, Any]) -> None:
    """A waiting client pings a quiet runtime and gives up with a clear error
    (the runtime is stopped with SIGSTOP, then let go)."""
    rt: Runtime = node["rt"]
    assert rt.proc is not None
    pid = rt.proc.pid

    async def async_wait(command_id: str) -> None:
        async with AsyncClient(**node["ipc"]) as akrex:
            handle = await akrex.attach(command_id)
            os.kill(pid, signal.SIGSTOP)
            await handle.wait()

    with Client(**node["ipc"]) as krex:
        handle = krex.submit(SLEEP)
        try:
            os.kill(pid, signal.SIGSTOP)
            with pytest.raises(RuntimeUnavailable, match="stopped answering"):
                handle.wait(timeout=120)
            os.kill(pid, signal.SIGCONT)
            with pytest.raises(RuntimeUnavailable, match="stopped answering"):
                asyncio.run(async_wait(handle.id))
        finally:
            os.kill(pid, signal.SIGCONT)
        assert handle.cancel() == "cancelled"


def test_one_options_type_makes_every_submit_body() -> None:
    """`submit`, `run`, `enqueue` and `map` take one options type: a Command's
    own options win over map's common ones, positional ones read as always."""
    from krex_runtime.api import SubmitOptions
    from krex_runtime.api.options import split

    argv, options = split(Command(["x"], 0, "pooled", 5.0, label="mine"), SubmitOptions(label="all", lease=True,
                                                                                        gpu_model="H200"))
    body = options.body(argv, attach=True)
    assert (body["argv"], body["gpu"], body["mode"], body["timeout_s"], body["label"]) == (["x"], 0, "pooled", 5.0, "mine")
    assert body["lease"] is True and body["gpu_model"] == "H200" and body["attach"] is True
    assert SubmitOptions().body(["x"], attach=False)["attach"] is False
    with pytest.raises(TypeError, match="not one string"):
        SubmitOptions().body("python3 bench.py", attach=True)
    for call in (Client.submit, Client.run, Client.map, Client.enqueue, AsyncClient.submit, AsyncClient.map):
        assert {"gpu", "lease", "retries", "on_output"} <= set(inspect.signature(call).parameters), call


def test_enqueue_queues_a_command_this_client_does_not_follow(where: dict[str, Any]) -> None:
    with Client(**where) as krex:
        reply = krex.enqueue(["sh", "-c", "echo later"], label="enqueued")
        result = krex.attach(reply["id"]).wait(timeout=60)
        with pytest.raises(ValueError, match="on_output"):
            krex.enqueue(["true"], on_output=print)
    assert set(reply) >= {"id", "state"} and result.label == "enqueued" and result.stdout == "later\n"


def test_an_on_output_that_raises_ends_its_wait_not_the_client(where: dict[str, Any]) -> None:
    def refuse(stream: str, text: str) -> None:
        raise LookupError(f"no room for {text!r}")

    seen: list[str] = []

    def nested(stream: str, text: str) -> None:
        try:
            krex.status()  # on the client's own thread: it would wait on itself
        except RuntimeError as exc:
            seen.append(str(exc))

    with Client(**where) as krex:
        handle = krex.submit([PY, "-u", "-c", "print('first'); import time; time.sleep(60)"], on_output=refuse)
        with pytest.raises(LookupError, match="first"):
            handle.wait(timeout=60)
        assert handle.cancel() == "cancelled"
        assert krex.run(["echo", "x"], on_output=nested).ok and krex.run(["true"]).ok
    assert seen and "its own thread" in seen[0]


def test_a_blocking_client_works_inside_an_event_loop_and_from_other_threads(node: dict[str, Any]) -> None:
    async def in_a_notebook_cell() -> Result:
        with Client(**node["ipc"]) as krex:  # blocking calls while this thread runs an event loop
            return krex.run(["echo", "cell"])

    assert asyncio.run(in_a_notebook_cell()).stdout == "cell\n"
    with Client(**node["ipc"]) as krex:
        handle = krex.submit(["echo", "elsewhere"])
        waited: list[Result] = []
        other = threading.Thread(target=lambda: waited.append(handle.wait(timeout=60)))
        other.start()
        other.join()
    assert [r.stdout for r in waited] == ["elsewhere\n"]
    with pytest.raises(RuntimeError, match="closed"):
        krex.status()
