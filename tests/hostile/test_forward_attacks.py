"""Hostile tenants against forwarded mode's context servers (docs/security.md,
"Forwarded mode"): a server serves one tenant after another, so it must run
as a uid no tenant is given, check every pointer and size a command sends
against what it keeps itself, and leave nothing of one command's memory to
the next.

A real runtime as root on the simulated driver (whose device memory keeps
what a freed allocation held, as a GPU's does within one process:
tests/native/test_simcuda_memory.py), each command a uid of its own from
`tenants.uid_range`, one context server, so that one command follows
another on it. The hostile commands are native/tests/forward_hostile.c.

- F1: the servers run as the runtime's user (or `forward.server_user`),
  never as a uid of the range, so handing a uid out or back kills none of
  them and a command cannot signal them; a server that died while idle is
  replaced before a command is given it.
- F2: a command of another uid cannot read what an earlier one left: not
  at its address, not past its own allocation, not by a device-to-device
  copy, not in its next allocation; handles the server never gave are
  refused, and a kernel that faults retires the server without a crash.
- F10: a command that grows its segment and rewrites its header, or
  truncates it, moves no bound of the server's and crashes neither the
  server nor the runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from runtime_helpers import REPO, module_runtime, regions_config

from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime, command, wait_until

FIRST_UID, UIDS, GROUP = 62300, 8, 62299
SERVER_UID = 62290  # a uid of no account and outside the range, for forward.server_user
PYTHON = "/usr/bin/python3"
SIZE = 4096
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_ILLEGAL_ADDRESS = 1, 400, 700

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(PYTHON).exists(), reason=f"needs root and {PYTHON}")

TENANTS = f'uid_range = [{FIRST_UID}, {UIDS}]\ngroup = "{GROUP}"\n'
# Strict forwarding: a hostile command's calls are answered by its server,
# never run again in process mode (where the simulator has no checks to test).
FORWARD = '\n[forward]\nservers_per_gpu = 1\nclean_timeout_s = 10\nfallback = "fail"\n'


@pytest.fixture(scope="module")
def hostile(native_built: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "forward-tests"], check=True)
    return native_build.native_dir() / "tests" / "forward_hostile"


@pytest.fixture(scope="module")
def open_root() -> Iterator[Path]:
    """A folder the tenants' uids may pass through (tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="krex-fwd-attacks-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def rt(open_root: Path, hostile: Path) -> Iterator[Runtime]:
    for runtime in module_runtime(open_root / "rt", sim=1, policy="krex", slots=4, tenants_extra=TENANTS,
                                  extra_config=regions_config() + FORWARD):
        wait_until(lambda: len(_servers(runtime)) == 1, 60, "the context server to be ready")
        yield runtime


def _servers(rt: Runtime) -> list[psutil.Process]:
    assert rt.proc is not None
    return [p for p in psutil.Process(rt.proc.pid).children() if p.name() == "krex-ctxd"]


def _server(rt: Runtime) -> psutil.Process:
    wait_until(lambda: len(_servers(rt)) == 1, 60, "one context server")
    return _servers(rt)[0]


def run(rt: Runtime, *argv: str, mode: str = "forwarded") -> dict[str, Any]:
    done = rt.krex("run", "--mode", mode, "--json", "--", *argv)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def said(result: dict[str, Any]) -> str:
    """A command's whole result, for a failed assertion's message."""
    return json.dumps(result)


def _lines(result: dict[str, Any]) -> dict[str, list[int]]:
    return {line.split()[0]: [int(x) for x in line.split()[1:]] for line in result["stdout"].splitlines()}


def _retired(rt: Runtime, server: psutil.Process, why: str) -> None:
    """`server` retired for `why` (an exit of its own, not a signal) and was replaced."""
    server.wait(30)
    log = rt.log_path.read_text()
    ready = next(line for line in log.splitlines() if f"(pid {server.pid}) ready" in line)
    name = ready.split("context server ", 1)[1].split()[0]
    wait_until(lambda: f"context server {name} of GPU 0 retired: {why}" in rt.log_path.read_text(), 30,
               f"{name} to retire: {why}")
    assert _server(rt).pid != server.pid


def _in_range(uid: int) -> bool:
    return FIRST_UID <= uid < FIRST_UID + UIDS


# --- F1: the servers are no tenant's -------------------------------------------------------


KILL = r"""
import errno, os, sys
for pid in map(int, sys.argv[1:]):
    try:
        os.kill(pid, 9)
        print("killed", pid)
    except OSError as exc:
        print(errno.errorcode[exc.errno], pid)
"""


def test_servers_run_as_no_tenant_uid_and_outlive_every_uid_handed_out(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    uids = server.uids()
    assert not any(map(_in_range, uids)) and uids.real == os.geteuid(), uids
    # Every uid of the range handed out and given back (each is swept then),
    # the first one (once the servers' own) included; each command tries to kill it.
    for _ in range(UIDS + 1):
        result = run(rt, PYTHON, "-c", KILL, str(server.pid), mode="process")
        assert result["stdout"].split() == ["EPERM", str(server.pid)], said(result)
    assert server.is_running() and _server(rt).pid == server.pid
    assert f"killed 1 leftover process(es) [{server.pid}]" not in rt.log_path.read_text()
    again = run(rt, str(hostile), "plant", str(SIZE))
    assert again["state"] == "finished", said(again)


def test_a_server_that_died_idle_is_replaced_before_a_command_gets_it(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    server.kill()
    server.wait(10)
    result = run(rt, str(hostile), "plant", str(SIZE))  # submitted at once: it must not be given the dead one
    assert result["state"] == "finished", said(result)
    assert _server(rt).pid != server.pid


def _refused_at_start(folder: Path, forward: str) -> subprocess.CompletedProcess[str]:
    runtime = Runtime(folder, tenants_extra=TENANTS, extra_config=forward)
    runtime.root.mkdir(parents=True)
    runtime.write_config()
    return subprocess.run([*command("krex-runtime"), "--config", str(runtime.config_path), "--sim", "1"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("user, line", [
    (str(FIRST_UID + 2), f"forward.server_user {FIRST_UID + 2} is a uid of tenants.uid_range"),
    ("nobody-krex-such", "forward.server_user names an unknown user 'nobody-krex-such'"),
])
def test_a_server_user_a_tenant_could_be_is_refused_at_start(tmp_path: Path, user: str, line: str) -> None:
    done = _refused_at_start(tmp_path / "rt", FORWARD + f'server_user = "{user}"\n')
    assert done.returncode == 125 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert line in done.stderr


def test_servers_run_as_a_dedicated_server_user(open_root: Path, make_runtime: Any, hostile: Path) -> None:
    rt = make_runtime(name="dedicated", parent=open_root, policy="krex", sim=1, slots=4, tenants_extra=TENANTS,
                      extra_config=regions_config() + FORWARD + f'server_user = "{SERVER_UID}"\n')
    server = _server(rt)
    assert tuple(server.uids()) == (SERVER_UID,) * 3 and server.gids().real == GROUP
    result = run(rt, str(hostile), "plant", str(SIZE))
    assert result["state"] == "finished", said(result)
    killer = run(rt, PYTHON, "-c", KILL, str(server.pid), mode="process")
    assert killer["stdout"].split() == ["EPERM", str(server.pid)], said(killer)


# --- F2: nothing of one command reaches the next ----------------------------------------------


def test_a_command_cannot_read_what_an_earlier_tenant_left_on_its_server(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    victim = run(rt, str(hostile), "plant", str(SIZE))
    assert victim["state"] == "finished", said(victim)
    planted = _lines(victim)
    thief = run(rt, str(hostile), "steal", str(planted["planted"][0]), str(SIZE))
    assert thief["state"] == "finished", said(thief)
    found = _lines(thief)
    uids = (planted.pop("uid")[0], found.pop("uid")[0])
    assert uids[0] != uids[1] and all(map(_in_range, uids)), uids
    assert {name: leaked for name, (_, leaked) in found.items()} == dict.fromkeys(found, 0), thief["stdout"]
    # Outside its own allocations: refused by the server, whatever the driver would do.
    for name in ("at-address", "memset-there", "past-own-end", "device-copy"):
        assert found[name][0] == CUDA_ERROR_INVALID_VALUE, (name, thief["stdout"])
    assert found["next-allocation"] == [0, 0]  # its own, zeroed
    # A kernel's arguments cannot be checked; what it reaches was zeroed.
    assert found["kernel-argument"][0] == 0
    assert _server(rt).pid == server.pid and server.is_running()  # the server served both, and serves on


def test_what_a_command_made_in_a_context_it_destroyed_goes_with_it(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    owner = run(rt, str(hostile), "context", str(SIZE))
    assert owner["state"] == "finished", said(owner)
    made = _lines(owner)
    # Its stream and memory went with the context: the server forgets them.
    assert made["stream-after"] == [CUDA_ERROR_INVALID_HANDLE], owner["stdout"]
    assert made["memory-after"] == [CUDA_ERROR_INVALID_VALUE], owner["stdout"]
    thief = run(rt, str(hostile), "steal", str(made["planted"][0]), str(SIZE))
    assert thief["state"] == "finished", said(thief)
    found = _lines(thief)
    found.pop("uid")
    assert {name: leaked for name, (_, leaked) in found.items()} == dict.fromkeys(found, 0), thief["stdout"]
    assert _server(rt).pid == server.pid


def test_handles_the_server_never_gave_are_refused_not_a_crash(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    result = run(rt, str(hostile), "handles")
    assert result["state"] == "finished", said(result)
    found = _lines(result)
    assert set(found) == {"stream-synchronize", "stream-query", "event-synchronize", "event-elapsed",
                          "module-function", "function-attribute", "launch", "launch-on-stream", "free",
                          "stream-destroy", "event-destroy", "module-unload", "synchronize"}, said(result)
    refused = {name: code for name, (code,) in found.items()}
    assert refused.pop("free") == CUDA_ERROR_INVALID_VALUE
    assert refused.pop("launch-on-stream") == 0  # sent without waiting: the next call that waits says it
    assert refused == dict.fromkeys(refused, CUDA_ERROR_INVALID_HANDLE), result["stdout"]
    assert _server(rt).pid == server.pid and server.is_running()


def test_a_kernel_that_faults_retires_its_server_without_a_crash(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    result = run(rt, str(hostile), "fault")
    assert result["stdout"].split() == ["synchronize", str(CUDA_ERROR_ILLEGAL_ADDRESS)], said(result)
    assert result["state"] == "finished", result  # it ran to its end: its error was its own
    _retired(rt, server, "its context is in an error state after the command")
    again = run(rt, str(hostile), "plant", str(SIZE))
    assert again["state"] == "finished", said(again)


# --- F10: the segment's sizes are the server's own ----------------------------------------------


def test_a_segment_grown_under_a_rewritten_header_moves_no_bound_of_the_server(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    result = run(rt, str(hostile), "grow")
    assert result["state"] == "failed", said(result)
    assert "refused a request" in result["reason"] and "died" not in result["reason"], said(result)
    assert "staging area holds" in result["reason"], said(result)
    _retired(rt, server, "it refused a request of its command")


def test_a_segment_truncated_under_its_server_crashes_neither_side(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    result = run(rt, str(hostile), "shrink")
    assert rt.proc is not None and rt.proc.poll() is None, "the runtime died"
    assert result["state"] == "failed", said(result)
    assert "truncated" in result["reason"] and "died" not in result["reason"], said(result)
    _retired(rt, server, "it refused a request of its command")
    again = run(rt, str(hostile), "plant", str(SIZE))
    assert again["state"] == "finished", said(again)
