"""A krex-runtime process on simulated GPUs in a folder of its own.

Tests, benchmarks and the demo start runtimes this way: a real process with a
generated config, reached through its real sockets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.api import Client

BIN = Path(sys.executable).parent
_MODULES = {"krex": "krex_runtime.cli", "krex-runtime": "krex_runtime.main"}


def command(name: str) -> list[str]:
    """How to run one of KREX's commands from this Python: the installed script,
    or the module where the package is used from a checkout without installing."""
    script = BIN / name
    return [str(script)] if script.exists() else [sys.executable, "-m", _MODULES[name]]


def wait_until(predicate: Any, timeout_s: float = 30.0, what: str = "condition", interval_s: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy; AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out waiting for {what}")


class RuntimeExited(AssertionError):
    """The runtime exited before it answered; `line` is the last line of its
    log (a runtime that cannot start says why in one)."""

    def __init__(self, returncode: int, log: str) -> None:
        super().__init__(f"runtime exited with {returncode}:\n{log}")
        self.returncode = returncode
        self.line = next((line for line in reversed(log.splitlines()) if line.strip()), f"exit status {returncode}")


@dataclass
class Runtime:
    """A krex-runtime process on simulated GPUs (sim=0: the node's real GPUs), in its own folders."""

    root: Path
    sim: int = 2
    sim_amd: int = 0  # simulated AMD GPUs, numbered after the `sim` NVIDIA ones
    policy: str = "ungated"
    slots: int = 4
    cgroups: str = "auto"
    extra_config: str = ""
    canary: bool = False
    on_shutdown: str = "cancel"
    shutdown_grace_s: float = 2.0
    visible: tuple[int, ...] = ()  # real GPUs to serve; () = all
    preload: bool = True
    canary_period_s: float | None = 0.5  # None: the runtime's default
    canary_target_ms: float | None = 1.0  # None: the runtime's default
    runtime_env: dict[str, str] = field(default_factory=dict)
    runtime_extra: str = ""  # more lines of [runtime]
    dispatcher_extra: str = ""  # more lines of [dispatcher]
    gpus_extra: str = ""  # more lines of [gpus]
    tenant_user: str = ""  # tenants.user; "": as whoever starts the runtime, root included
    tenants_extra: str = ""  # more lines of [tenants]
    runtime_argv: tuple[str, ...] = ()  # how to start krex-runtime; (): this Python's
    trace_file: Path | None = None  # None: <run_dir>/trace.jsonl
    keep_finished: int | None = None  # finished commands kept in memory (node state, dispatcher); None: defaults
    proc: subprocess.Popen[bytes] | None = None
    device: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")
    answer_timeout_s: float = 30.0  # how long start() waits for the first answer to hello
    _unanswered: str = field(default="", repr=False)  # why the last hello of start() got no answer

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def trace_path(self) -> Path:
        return self.trace_file or self.run_dir / "trace.jsonl"

    @property
    def lock_dir(self) -> Path:
        return self.root / "locks"

    @property
    def config_path(self) -> Path:
        return self.root / "krex.toml"

    @property
    def log_path(self) -> Path:
        return self.root / "runtime.log"

    def write_config(self) -> None:
        self.config_path.write_text(
            f"""
[runtime]
run_dir = "{self.run_dir}"
lock_dir = "{self.lock_dir}"
policy = "{self.policy}"
snapshot_interval_s = 0.2
on_shutdown = "{self.on_shutdown}"
shutdown_grace_s = {self.shutdown_grace_s}
{self.runtime_extra}
{f"snapshot_finished = {self.keep_finished}" if self.keep_finished else ""}

[gpus]
visible = {list(self.visible)}
simulated_amd = {self.sim_amd}
simulated_device = "{self.device}"
simulated_log = "{self.root / 'sim.log'}"
{self.gpus_extra}

[dispatcher]
slots_per_gpu = {self.slots}
kill_grace_s = 0.5
orphan_grace_s = 0.5
{f"keep_finished = {self.keep_finished}" if self.keep_finished else ""}
{self.dispatcher_extra}

[tenants]
cgroups = "{self.cgroups}"
preload = {str(self.preload).lower()}
user = "{self.tenant_user}"
allow_root = true
{self.tenants_extra}

[telemetry]
canary = {str(self.canary).lower()}
sample_interval_s = 0.5
{f"canary_period_s = {self.canary_period_s}" if self.canary_period_s is not None else ""}
{f"canary_target_ms = {self.canary_target_ms}" if self.canary_target_ms is not None else ""}
{self.extra_config}
"""
        )

    def start(self) -> Runtime:
        self.root.mkdir(parents=True, exist_ok=True)
        self.write_config()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *(self.runtime_argv or command("krex-runtime")),
                    "--config",
                    str(self.config_path),
                    *(["--sim", str(self.sim)] if self.sim else []),
                    *(["--trace", str(self.trace_file)] if self.trace_file else []),
                ],
                stdout=log,
                env={**self.env, **self.runtime_env},
                stderr=subprocess.STDOUT,
            )
        self._unanswered = "its control socket does not exist yet"
        try:
            wait_until(self._answers, self.answer_timeout_s, "the runtime to answer")
        except AssertionError as e:
            if self.proc.poll() is not None:
                raise  # it exited: _answers said so, with its log
            # One that never answered is stopped here: whoever called start()
            # has no Runtime to stop, and it would serve on, unseen, for good.
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{e} (last: {self._unanswered})") from None
        return self

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeExited(self.proc.returncode, self.log_path.read_text())
        if not (self.run_dir / "control.sock").exists():
            return False
        try:
            with self.client(timeout_s=1.0) as c:
                c.call("hello")
            return True
        except Exception as e:
            self._unanswered = f"{type(e).__name__}: {e}"
            return False

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KREX_RUN_DIR": str(self.run_dir)}

    def wait_pool_warm(self, size: int, timeout_s: float = 900.0) -> float:
        """Seconds until every GPU has `size` idle context processes."""
        t0 = time.monotonic()
        with self.client(timeout_s=60) as client:
            while True:
                gpus = client.call("snapshot")["state"]["gpus"]
                if all(g["pool"]["idle"] >= size for g in gpus):
                    return time.monotonic() - t0
                if time.monotonic() - t0 > timeout_s:
                    raise AssertionError(f"the context pool was not warm after {timeout_s:.0f} s: {[g['pool'] for g in gpus]}")
                time.sleep(0.2)

    def client(self, timeout_s: float = 10.0) -> Client:
        return Client(f"ipc://{self.run_dir / 'control.sock'}", timeout=timeout_s)

    def krex(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command("krex"), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("runtime did not stop within 60 s of SIGTERM") from None
