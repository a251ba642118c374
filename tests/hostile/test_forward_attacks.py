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

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from forward_hostile import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
    FIRST_UID,
    GROUP,
    UID_RANGE,
    UIDS,
    build_hostile,
    failed_without_a_crash,
    finished,
    forward_config,
    handles_refused,
    lines,
    nothing_leaked,
    one_server,
    run,
    said,
)
from runtime_helpers import module_runtime, regions_config, start_refused

from krex_runtime.testing.local_runtime import Runtime, wait_until

SERVER_UID = 62290  # a uid of no account and outside the range, for forward.server_user
PYTHON = "/usr/bin/python3"
SIZE = 4096

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(PYTHON).exists(), reason=f"needs root and {PYTHON}")

# Strict forwarding (the simulator has no checks to test in process mode).
FORWARD = forward_config(clean_timeout_s=10)


@pytest.fixture(scope="module")
def hostile(native_built: Path) -> Path:
    return build_hostile()


@pytest.fixture(scope="module")
def rt(open_module_root: Path, hostile: Path) -> Iterator[Runtime]:
    for runtime in module_runtime(open_module_root / "rt", sim=1, policy="krex", slots=4, tenants_extra=UID_RANGE,
                                  extra_config=regions_config() + FORWARD):
        one_server(runtime)
        yield runtime


def _retired(rt: Runtime, server: psutil.Process, why: str) -> None:
    """`server` retired for `why` (an exit of its own, not a signal) and was replaced."""
    server.wait(30)
    log = rt.log_path.read_text()
    ready = next(line for line in log.splitlines() if f"(pid {server.pid}) ready" in line)
    name = ready.split("context server ", 1)[1].split()[0]
    wait_until(lambda: f"context server {name} of GPU 0 retired: {why}" in rt.log_path.read_text(), 30,
               f"{name} to retire: {why}")
    assert one_server(rt).pid != server.pid


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
    server = one_server(rt)
    uids = server.uids()
    assert not any(map(_in_range, uids)) and uids.real == os.geteuid(), uids
    # Every uid of the range handed out and given back (each is swept then),
    # the first one (once the servers' own) included; each command tries to kill it.
    for _ in range(UIDS + 1):
        result = run(rt, PYTHON, "-c", KILL, str(server.pid), mode="process")
        assert result["stdout"].split() == ["EPERM", str(server.pid)], said(result)
    assert server.is_running() and one_server(rt).pid == server.pid
    assert f"killed 1 leftover process(es) [{server.pid}]" not in rt.log_path.read_text()
    finished(rt, str(hostile), "plant", str(SIZE))


def test_a_server_that_died_idle_is_replaced_before_a_command_gets_it(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt)
    server.kill()
    server.wait(10)
    finished(rt, str(hostile), "plant", str(SIZE))  # submitted at once: it must not be given the dead one
    assert one_server(rt).pid != server.pid


@pytest.mark.parametrize("user, line", [
    (str(FIRST_UID + 2), f"forward.server_user {FIRST_UID + 2} is a uid of tenants.uid_range"),
    ("nobody-krex-such", "forward.server_user names an unknown user 'nobody-krex-such'"),
])
def test_a_server_user_a_tenant_could_be_is_refused_at_start(tmp_path: Path, user: str, line: str) -> None:
    said = start_refused(Runtime(tmp_path / "rt", sim=1, tenants_extra=UID_RANGE,
                                 extra_config=FORWARD + f'server_user = "{user}"\n'))
    assert line in said


def test_servers_run_as_a_dedicated_server_user(open_root: Path, make_runtime: Any, hostile: Path) -> None:
    rt = make_runtime(name="dedicated", parent=open_root, policy="krex", sim=1, slots=4, tenants_extra=UID_RANGE,
                      extra_config=regions_config() + FORWARD + f'server_user = "{SERVER_UID}"\n')
    server = one_server(rt)
    assert tuple(server.uids()) == (SERVER_UID,) * 3 and server.gids().real == GROUP
    finished(rt, str(hostile), "plant", str(SIZE))
    killer = run(rt, PYTHON, "-c", KILL, str(server.pid), mode="process")
    assert killer["stdout"].split() == ["EPERM", str(server.pid)], said(killer)


# --- F2: nothing of one command reaches the next ----------------------------------------------


def test_a_command_cannot_read_what_an_earlier_tenant_left_on_its_server(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt)
    planted = lines(finished(rt, str(hostile), "plant", str(SIZE)))
    thief = finished(rt, str(hostile), "steal", str(planted["planted"][0]), str(SIZE))
    uids = (planted.pop("uid")[0], lines(thief)["uid"][0])
    assert uids[0] != uids[1] and all(map(_in_range, uids)), uids
    found = nothing_leaked(thief)
    # Outside its own allocations: refused by the server, whatever the driver would do.
    for name in ("at-address", "memset-there", "past-own-end", "device-copy"):
        assert found[name][0] == CUDA_ERROR_INVALID_VALUE, (name, thief["stdout"])
    assert found["next-allocation"] == [0, 0]  # its own, zeroed
    # A kernel's arguments cannot be checked; what it reaches was zeroed.
    assert found["kernel-argument"][0] == 0
    assert one_server(rt).pid == server.pid and server.is_running()  # the server served both, and serves on


def test_what_a_command_made_in_a_context_it_destroyed_goes_with_it(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt)
    owner = finished(rt, str(hostile), "context", str(SIZE))
    made = lines(owner)
    # Its stream and memory went with the context: the server forgets them.
    assert made["stream-after"] == [CUDA_ERROR_INVALID_HANDLE], owner["stdout"]
    assert made["memory-after"] == [CUDA_ERROR_INVALID_VALUE], owner["stdout"]
    nothing_leaked(finished(rt, str(hostile), "steal", str(made["planted"][0]), str(SIZE)))
    assert one_server(rt).pid == server.pid


def test_handles_the_server_never_gave_are_refused_not_a_crash(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt)
    result = finished(rt, str(hostile), "handles")
    assert set(lines(result)) == {"stream-synchronize", "stream-query", "event-synchronize", "event-elapsed",
                                  "module-function", "function-attribute", "launch", "launch-on-stream", "free",
                                  "stream-destroy", "event-destroy", "module-unload", "synchronize"}, said(result)
    handles_refused(result)
    assert one_server(rt).pid == server.pid and server.is_running()


def test_a_kernel_that_faults_retires_its_server_without_a_crash(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt)
    result = run(rt, str(hostile), "fault")
    assert result["stdout"].split() == ["synchronize", str(CUDA_ERROR_ILLEGAL_ADDRESS)], said(result)
    assert result["state"] == "finished", result  # it ran to its end: its error was its own
    _retired(rt, server, "its context is in an error state after the command")
    finished(rt, str(hostile), "plant", str(SIZE))


# --- F10: the segment's sizes are the server's own ----------------------------------------------


def test_a_segment_grown_under_a_rewritten_header_moves_no_bound_of_the_server(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt)
    result = run(rt, str(hostile), "grow")
    failed_without_a_crash(rt, result, "refused a request")
    assert "staging area holds" in result["reason"], said(result)
    _retired(rt, server, "it refused a request of its command")


def test_a_segment_truncated_under_its_server_crashes_neither_side(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt)
    failed_without_a_crash(rt, run(rt, str(hostile), "shrink"), "truncated")
    _retired(rt, server, "it refused a request of its command")
    finished(rt, str(hostile), "plant", str(SIZE))
