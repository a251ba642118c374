"""What the tests of forwarded mode's context servers against hostile
commands share, on the simulated driver (tests/hostile/test_forward_attacks.py)
and on a real GPU (tests/gpu/test_gpu_forward_attacks.py): the uid range the
commands run as, the hostile program (native/tests/forward_hostile.c), the
runtime's servers, and the checks both make of what the attacks got."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psutil
from runtime_helpers import REPO

from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime, wait_until

FIRST_UID, UIDS, GROUP = 62300, 8, 62299
UID_RANGE = f'uid_range = [{FIRST_UID}, {UIDS}]\ngroup = "{GROUP}"\n'
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_ILLEGAL_ADDRESS = 1, 400, 700


def forward_config(clean_timeout_s: float) -> str:
    """One context server per GPU, strict: a hostile command's calls are
    answered by its server, never run again in process mode."""
    return f'\n[forward]\nservers_per_gpu = 1\nclean_timeout_s = {clean_timeout_s:g}\nfallback = "fail"\n'


def build_hostile() -> Path:
    """The hostile program, built."""
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "forward-tests"], check=True)
    return native_build.native_dir() / "tests" / "forward_hostile"


def context_servers(rt: Runtime) -> list[psutil.Process]:
    assert rt.proc is not None
    return [p for p in psutil.Process(rt.proc.pid).children() if p.name() == "krex-ctxd"]


def one_server(rt: Runtime, timeout_s: float = 60) -> psutil.Process:
    wait_until(lambda: len(context_servers(rt)) == 1, timeout_s, "one context server")
    return context_servers(rt)[0]


def run(rt: Runtime, *argv: str, mode: str = "forwarded") -> dict[str, Any]:
    """`krex run --json` of `argv`: the command's whole result."""
    result: dict[str, Any] = json.loads(rt.krex("run", "--mode", mode, "--json", "--", *argv).stdout)
    return result


def said(result: dict[str, Any]) -> str:
    """A command's whole result, for a failed assertion's message."""
    return json.dumps(result)


def lines(result: dict[str, Any]) -> dict[str, list[int]]:
    """The hostile program's report: a name and its numbers per line."""
    return {line.split()[0]: [int(x) for x in line.split()[1:]] for line in result["stdout"].splitlines()}


def finished(rt: Runtime, *argv: str) -> dict[str, Any]:
    """A forwarded command that must finish: its result."""
    result = run(rt, *argv)
    assert result["state"] == "finished", said(result)
    return result


def nothing_leaked(thief: dict[str, Any]) -> dict[str, list[int]]:
    """The `steal` attack's report, less its uid, once every place it read
    is seen to hold none of the planted bytes."""
    found = lines(thief)
    found.pop("uid", None)
    assert {name: leaked for name, (_, leaked) in found.items()} == dict.fromkeys(found, 0), thief["stdout"]
    return found


def handles_refused(result: dict[str, Any]) -> None:
    """The `handles` attack: every handle the server never gave refused."""
    refused = {name: code for name, (code,) in lines(result).items()}
    assert refused.pop("free") == CUDA_ERROR_INVALID_VALUE
    assert refused.pop("launch-on-stream") == 0  # sent without waiting: the next call that waits says it
    assert refused == dict.fromkeys(refused, CUDA_ERROR_INVALID_HANDLE), result["stdout"]


def failed_without_a_crash(rt: Runtime, result: dict[str, Any], why: str) -> None:
    """A segment attack (`grow`, `shrink`): its command failed with `why`,
    and neither the runtime nor the server died of it."""
    assert rt.proc is not None and rt.proc.poll() is None, "the runtime died"
    assert result["state"] == "failed", said(result)
    assert why in result["reason"] and "died" not in result["reason"], said(result)
