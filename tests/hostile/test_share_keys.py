"""A submitter cannot take more than its fair share by choosing share keys.

Share keys are the client's to choose, so fair share is keyed first by who
submitted, by the kernel's word (the control socket's SO_PEERCRED uid), and
a key only divides its submitter's share (host/fair_share.py). Two
submitters with uids of their own reach the control socket through
`runtime.access_group`; one takes a fresh key for every command, as a
client gaming fair share would. In the admission queue its commands take
turns with the other's, one each, rather than all going first; in a GPU's
region queue the two get equal region time, rather than one share per key.
A tcp client is a submitter by its CURVE key's name, whatever key it names.
"""

from __future__ import annotations

import grp
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, TENANTS, regions_config, run_as, trace_events, wait_ready

from krex_runtime.api import Client
from krex_runtime.service.curve import create_key_pair
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.transport.keys import CLIENT_KEY_ENV, SERVER_KEY_ENV
from krex_runtime.wire.trace.jsonl import read_trace

GAMER, STEADY = 62300, 62301  # submitters' uids, no account: their share keys are "uid62300"...
GROUP = "users"  # runtime.access_group: its members reach the control socket

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to submit as other uids")


def submit_as(uid: int, rt: Runtime, argv: list[str], share: str = "") -> str:
    """Submit in a forked child running as `uid`, a member of the access group only."""

    def submit() -> str:
        with Client(f"ipc://{rt.run_dir}/control.sock", timeout=10) as c:
            return str(c.call("submit", {"argv": argv, "cwd": "/", "share": share})["id"])

    return str(run_as(uid, uid, [grp.getgrnam(GROUP).gr_gid], submit))


def test_fresh_keys_do_not_overtake_another_submitter_in_admission(open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, policy="ungated", sim=1, slots=1, runtime_extra=f'access_group = "{GROUP}"')
    go = open_root / "go"
    blocker = rt.krex("submit", "--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done").stdout.strip()
    wait_until(lambda: any(e["id"] == blocker for e in trace_events(rt, "command_started")), 30, "the slot taken")
    gamer = [submit_as(GAMER, rt, ["true"], share=f"fresh-{i}") for i in range(6)]
    steady = [submit_as(STEADY, rt, ["true"]) for _ in range(3)]
    go.touch()
    for command_id in [blocker, *gamer, *steady]:
        assert rt.krex("wait", command_id).returncode == 0
    queued = {e["id"]: e["share"] for e in trace_events(rt, "command_queued")}
    assert [queued[i] for i in gamer] == [f"uid{GAMER}/fresh-{i}" for i in range(6)]
    assert {queued[i] for i in steady} == {f"uid{STEADY}"}
    started = [e["id"] for e in trace_events(rt, "command_started") if e["id"] != blocker]
    who = ["gamer" if i in gamer else "steady" for i in started]
    # One each while both wait: six fresh keys are one submitter (one key each would put all six first).
    assert who == ["gamer", "steady"] * 3 + ["gamer"] * 3, who


def test_fresh_keys_do_not_take_more_region_time_than_another_submitter(open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, policy="krex", sim=1, slots=16, extra_config=regions_config("preload"),
                      runtime_extra=f'access_group = "{GROUP}"')
    go = open_root / "go"
    gamer = [submit_as(GAMER, rt, [PY, str(TENANTS / "share_regions.py"), str(go), "4"], share=f"fresh-{i}")
             for i in range(6)]
    steady = submit_as(STEADY, rt, [PY, str(TENANTS / "share_regions.py"), str(go), "8"])
    wait_ready(rt, *gamer, steady)  # all of them ask from the same moment on
    go.touch()
    for command_id in [*gamer, steady]:
        assert rt.krex("wait", command_id).returncode == 0
    events = read_trace(rt.trace_path).events
    tenant_of = {e["id"]: e["tenant_id"] for e in events if e["type"] == "command_started"}
    lone = tenant_of[steady]
    # The window in which both wanted the GPU: the steady submitter's first request to its last release.
    requested = [i for i, e in enumerate(events) if e["type"] == "region_requested" and e["tenant_id"] == lone]
    released = [i for i, e in enumerate(events) if e["type"] == "region_released" and e["tenant_id"] == lone]
    held = {"steady": 0.0, "gamer": 0.0}
    for e in events[requested[0]:released[-1] + 1]:
        if e["type"] == "region_released" and e["kind"] == "region":
            held["steady" if e["tenant_id"] == lone else "gamer"] += e["hold_s"]
    # Six keys of one submitter against one: about half each. One share per key
    # would give the six keys 6/7 (0.86) of the time; the bound sits well
    # between, since hold times move with this machine's load.
    gamer_share = held["gamer"] / (held["gamer"] + held["steady"])
    assert 0.3 <= gamer_share <= 0.65, held


def test_a_tcp_client_submits_as_its_keys_name(make_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys, clients = tmp_path / "keys", tmp_path / "clients"
    server_public, server_secret = create_key_pair(keys, "server")
    agent_public, agent_secret = create_key_pair(keys, "agent")
    clients.mkdir()
    shutil.copy(agent_public, clients)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        control = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    rt = make_runtime(policy="ungated", sim=1, runtime_extra=(
        f'control_tcp = "{control}"\ncurve_server_key = "{server_secret}"\ncurve_clients = "{clients}"'))
    monkeypatch.setenv(SERVER_KEY_ENV, str(server_public))
    monkeypatch.setenv(CLIENT_KEY_ENV, str(agent_secret))
    with Client(control, timeout=10) as c:
        named = c.call("submit", {"argv": ["true"], "share": "root"})["id"]
        plain = c.call("submit", {"argv": ["true"]})["id"]
    for command_id in (named, plain):
        assert rt.krex("wait", command_id).returncode == 0
    queued = {e["id"]: e["share"] for e in trace_events(rt, "command_queued")}
    # A key named like another submitter only divides this client's own share.
    assert (queued[named], queued[plain]) == ("key:agent/root", "key:agent")
