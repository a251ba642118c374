"""Starting a node's krex-runtime as a child of its agent, and saying how it ended.

The runtime dies with the agent (PR_SET_PDEATHSIG): a Ray node that goes
away takes its runtime with it, which then cancels its commands and cleans
up as on any SIGTERM, instead of running on unseen. Ray's worker sets
CUDA_VISIBLE_DEVICES to "" for an actor that asked for no GPU; the runtime
must see the node's GPUs, so that is removed unless the node's spec sets it.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

from krex_cluster.config import NodeSpec
from krex_runtime.wire.protocol.endpoints import default_run_dir

_PR_SET_PDEATHSIG = 1


def run_dir_of(spec: NodeSpec) -> Path:
    """Where the node's runtime puts its sockets: the spec's run dir, else
    the one its config names, else the runtime's default."""
    if spec.run_dir:
        return Path(spec.run_dir)
    if spec.config:
        try:
            named = tomllib.loads(Path(spec.config).read_text()).get("runtime", {}).get("run_dir", "")
        except (OSError, tomllib.TOMLDecodeError):
            named = ""  # the runtime itself will say what is wrong with its config
        if named:
            return Path(named)
    return default_run_dir()


def runtime_argv(spec: NodeSpec) -> list[str]:
    script = Path(sys.executable).parent / "krex-runtime"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "krex_runtime.main"]
    if spec.config:
        argv += ["--config", spec.config]
    if spec.sim:
        argv += ["--sim", str(spec.sim)]
    if spec.run_dir:
        argv += ["--run-dir", spec.run_dir]
    return argv


def runtime_env(spec: NodeSpec) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return {**env, **spec.env}


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


async def start(spec: NodeSpec, log_path: str) -> asyncio.subprocess.Process:
    """The runtime as a child process, its output appended to `log_path`
    ("": the agent's own, which Ray keeps in its worker logs)."""
    # Opening a local log file does not block the loop in any way that matters; the child holds it.
    log: Any = open(log_path, "ab") if log_path else None  # noqa: SIM115, ASYNC230
    try:
        return await asyncio.create_subprocess_exec(
            *runtime_argv(spec), env=runtime_env(spec), stdin=asyncio.subprocess.DEVNULL,
            stdout=log, stderr=asyncio.subprocess.STDOUT if log else None, preexec_fn=_die_with_parent,
        )
    finally:
        if log is not None:
            log.close()


def how_it_ended(returncode: int | None) -> str:
    if returncode is None:
        return "did not answer"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by {name}"
    return f"exited with status {returncode}"
