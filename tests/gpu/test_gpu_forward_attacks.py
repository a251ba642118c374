"""Forwarded mode's context server against hostile commands on a real GPU:
the attacks of tests/hostile/test_forward_attacks.py (F2, F10), with the real
driver behind the server instead of the simulated one. Skipped without a GPU
(marker `gpu`); run as root, the commands get uids of their own.

    make -C native all forward-tests && python -m pytest -m gpu tests/gpu/test_gpu_forward_attacks.py -q

- F2: a command cannot read what an earlier one left in the server's device
  memory: not at its address, not past its own allocation, not by a
  device-to-device copy, not in its next allocation (which the real driver
  may hand out from the same pages); handles the server never gave are
  refused; a kernel that touches an address outside device memory faults
  its context (CUDA_ERROR_ILLEGAL_ADDRESS) and the server retires, never
  crashes.
- F10: a command that grows its segment under a rewritten header, or
  truncates it, moves no bound of the server and crashes neither it nor the
  runtime.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forward_hostile import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
    UID_RANGE,
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
from runtime_helpers import open_folder, regions_config

from krex_runtime.testing.local_runtime import Runtime

pytestmark = pytest.mark.gpu

SIZE = 1 << 20
AS_ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def hostile(native_built: Path) -> Path:
    return build_hostile()


@pytest.fixture
def open_root() -> Iterator[Path]:
    """The tenants' uids pass through to the run folder. Asked before
    make_runtime, it outlives the runtime, whose checks after the test read it."""
    yield from open_folder("krex-gpu-fwd-")


@pytest.fixture
def rt(open_root: Path, make_runtime: Any, hostile: Path) -> Iterator[Runtime]:
    """A runtime on GPU 0 with one context server, so that one command follows
    another on it; with root, each command a uid of its own."""
    runtime = make_runtime(parent=open_root, policy="krex", sim=0, visible=(0,), slots=4,
                           tenants_extra=UID_RANGE if AS_ROOT else "",
                           extra_config=regions_config("preload") + forward_config(clean_timeout_s=30))
    one_server(runtime, 120)
    yield runtime


def test_f2_no_command_reads_an_earlier_ones_device_memory(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt, 120)
    planted = lines(finished(rt, str(hostile), "plant", str(SIZE)))
    thief = finished(rt, str(hostile), "steal", str(planted["planted"][0]), str(SIZE))
    if AS_ROOT:
        assert planted.pop("uid") != lines(thief).pop("uid")
    found = nothing_leaked(thief)
    for name in ("at-address", "memset-there", "past-own-end", "device-copy"):
        assert found[name][0] == CUDA_ERROR_INVALID_VALUE, (name, thief["stdout"])
    assert found["next-allocation"] == [0, 0]
    # The kernel's wild counter is a value the server cannot check: where the
    # driver still maps that memory the kernel adds one to zeroed bytes, else
    # it faults its context (and the server retires after the command).
    assert found["kernel-argument"][0] in (0, CUDA_ERROR_ILLEGAL_ADDRESS), thief["stdout"]
    if found["kernel-argument"][0] == 0:
        assert one_server(rt, 120).pid == server.pid


def test_f2_what_a_command_made_in_a_context_it_destroyed_goes_with_it(rt: Runtime, hostile: Path) -> None:
    owner = finished(rt, str(hostile), "context", str(SIZE))
    made = lines(owner)
    assert made["stream-after"] == [CUDA_ERROR_INVALID_HANDLE], owner["stdout"]
    assert made["memory-after"] == [CUDA_ERROR_INVALID_VALUE], owner["stdout"]
    nothing_leaked(finished(rt, str(hostile), "steal", str(made["planted"][0]), str(SIZE)))


def test_f2_handles_the_server_never_gave_are_refused(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt, 120)
    handles_refused(finished(rt, str(hostile), "handles"))
    assert one_server(rt, 120).pid == server.pid and server.is_running()


def test_f2_a_kernel_that_faults_retires_its_server(rt: Runtime, hostile: Path) -> None:
    server = one_server(rt, 120)
    result = run(rt, str(hostile), "fault")
    assert result["stdout"].split() == ["synchronize", str(CUDA_ERROR_ILLEGAL_ADDRESS)], said(result)
    server.wait(60)
    assert one_server(rt, 120).pid != server.pid
    finished(rt, str(hostile), "plant", str(SIZE))


def test_f10_a_grown_segment_moves_no_bound_of_the_server(rt: Runtime, hostile: Path) -> None:
    failed_without_a_crash(rt, run(rt, str(hostile), "grow"), "staging area holds")
    finished(rt, str(hostile), "plant", str(SIZE))


def test_f10_a_truncated_segment_crashes_neither_side(rt: Runtime, hostile: Path) -> None:
    failed_without_a_crash(rt, run(rt, str(hostile), "shrink"), "truncated")
    finished(rt, str(hostile), "plant", str(SIZE))
