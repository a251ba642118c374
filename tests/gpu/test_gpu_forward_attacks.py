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
from runtime_helpers import REPO, regions_config

from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime, wait_until

pytestmark = pytest.mark.gpu

SIZE = 1 << 20
FIRST_UID, UIDS, GROUP = 62300, 8, 62299
FORWARD = '\n[forward]\nservers_per_gpu = 1\nclean_timeout_s = 30\nfallback = "fail"\n'  # strict: served, never re-run
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_ILLEGAL_ADDRESS = 1, 400, 700
AS_ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def hostile(native_built: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "forward-tests"], check=True)
    return native_build.native_dir() / "tests" / "forward_hostile"


@pytest.fixture
def rt(make_runtime: Any, hostile: Path) -> Iterator[Runtime]:
    """A runtime on GPU 0 with one context server, so that one command follows
    another on it; with root, each command a uid of its own."""
    folder = Path(tempfile.mkdtemp(prefix="krex-gpu-fwd-", dir="/tmp"))
    folder.chmod(0o755)  # the tenants' uids pass through to the run folder
    tenants = f'uid_range = [{FIRST_UID}, {UIDS}]\ngroup = "{GROUP}"\n' if AS_ROOT else ""
    runtime = make_runtime(parent=folder, policy="krex", sim=0, visible=(0,), slots=4, tenants_extra=tenants,
                           extra_config=regions_config("preload") + FORWARD)
    _server(runtime)
    yield runtime
    shutil.rmtree(folder, ignore_errors=True)


def _server(rt: Runtime) -> psutil.Process:
    assert rt.proc is not None

    def one() -> list[psutil.Process]:
        return [p for p in psutil.Process(rt.proc.pid).children() if p.name() == "krex-ctxd"]  # type: ignore[union-attr]

    wait_until(lambda: len(one()) == 1, 120, "the context server to be ready")
    return one()[0]


def run(rt: Runtime, *argv: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(rt.krex("run", "--mode", "forwarded", "--json", "--", *argv).stdout)
    return result


def said(result: dict[str, Any]) -> str:
    return json.dumps(result)


def _lines(result: dict[str, Any]) -> dict[str, list[int]]:
    return {line.split()[0]: [int(x) for x in line.split()[1:]] for line in result["stdout"].splitlines()}


def test_f2_no_command_reads_an_earlier_ones_device_memory(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    victim = run(rt, str(hostile), "plant", str(SIZE))
    assert victim["state"] == "finished", said(victim)
    planted = _lines(victim)
    thief = run(rt, str(hostile), "steal", str(planted["planted"][0]), str(SIZE))
    assert thief["state"] == "finished", said(thief)
    found = _lines(thief)
    if AS_ROOT:
        assert planted.pop("uid") != found.pop("uid")
    found.pop("uid", None)
    assert {name: leaked for name, (_, leaked) in found.items()} == dict.fromkeys(found, 0), thief["stdout"]
    for name in ("at-address", "memset-there", "past-own-end", "device-copy"):
        assert found[name][0] == CUDA_ERROR_INVALID_VALUE, (name, thief["stdout"])
    assert found["next-allocation"] == [0, 0]
    # The kernel's wild counter is a value the server cannot check: where the
    # driver still maps that memory the kernel adds one to zeroed bytes, else
    # it faults its context (and the server retires after the command).
    assert found["kernel-argument"][0] in (0, CUDA_ERROR_ILLEGAL_ADDRESS), thief["stdout"]
    if found["kernel-argument"][0] == 0:
        assert _server(rt).pid == server.pid


def test_f2_what_a_command_made_in_a_context_it_destroyed_goes_with_it(rt: Runtime, hostile: Path) -> None:
    owner = run(rt, str(hostile), "context", str(SIZE))
    assert owner["state"] == "finished", said(owner)
    made = _lines(owner)
    assert made["stream-after"] == [CUDA_ERROR_INVALID_HANDLE], owner["stdout"]
    assert made["memory-after"] == [CUDA_ERROR_INVALID_VALUE], owner["stdout"]
    thief = run(rt, str(hostile), "steal", str(made["planted"][0]), str(SIZE))
    assert thief["state"] == "finished", said(thief)
    found = _lines(thief)
    found.pop("uid", None)
    assert {name: leaked for name, (_, leaked) in found.items()} == dict.fromkeys(found, 0), thief["stdout"]


def test_f2_handles_the_server_never_gave_are_refused(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    result = run(rt, str(hostile), "handles")
    assert result["state"] == "finished", said(result)
    refused = {name: code for name, (code,) in _lines(result).items()}
    assert refused.pop("free") == CUDA_ERROR_INVALID_VALUE
    assert refused.pop("launch-on-stream") == 0  # sent without waiting: the next call that waits says it
    assert refused == dict.fromkeys(refused, CUDA_ERROR_INVALID_HANDLE), result["stdout"]
    assert _server(rt).pid == server.pid and server.is_running()


def test_f2_a_kernel_that_faults_retires_its_server(rt: Runtime, hostile: Path) -> None:
    server = _server(rt)
    result = run(rt, str(hostile), "fault")
    assert result["stdout"].split() == ["synchronize", str(CUDA_ERROR_ILLEGAL_ADDRESS)], said(result)
    server.wait(60)
    assert _server(rt).pid != server.pid
    again = run(rt, str(hostile), "plant", str(SIZE))
    assert again["state"] == "finished", said(again)


def test_f10_a_grown_segment_moves_no_bound_of_the_server(rt: Runtime, hostile: Path) -> None:
    result = run(rt, str(hostile), "grow")
    assert result["state"] == "failed", said(result)
    assert "staging area holds" in result["reason"] and "died" not in result["reason"], said(result)
    again = run(rt, str(hostile), "plant", str(SIZE))
    assert again["state"] == "finished", said(again)


def test_f10_a_truncated_segment_crashes_neither_side(rt: Runtime, hostile: Path) -> None:
    result = run(rt, str(hostile), "shrink")
    assert rt.proc is not None and rt.proc.poll() is None, "the runtime died"
    assert result["state"] == "failed", said(result)
    assert "truncated" in result["reason"] and "died" not in result["reason"], said(result)
    again = run(rt, str(hostile), "plant", str(SIZE))
    assert again["state"] == "finished", said(again)
