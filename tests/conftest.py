"""Fixtures that start real runtimes (simulated GPUs) and real CLI processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from krex_runtime import native_build
from krex_runtime.control_client import ControlClient

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


@pytest.fixture(scope="session")
def native_built() -> Path:
    """Build native/ once per test session (the README's test command did too)."""
    subprocess.run(["make", "-s", "-C", str(REPO / "native")], check=True)
    lib = native_build.interception_library()
    assert lib.exists(), f"make did not produce {lib}"
    return lib


def wait_until(predicate: Any, timeout_s: float = 30.0, what: str = "condition") -> Any:
    """Poll until `predicate()` is truthy; fail the test after a generous bound."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Runtime:
    """A krex-runtime process on simulated GPUs, in its own folders."""

    root: Path
    sim: int = 2
    policy: str = "ungated"
    slots: int = 4
    cgroups: str = "auto"
    extra_config: str = ""
    proc: subprocess.Popen[bytes] | None = None
    device: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def trace_path(self) -> Path:
        return self.run_dir / "trace.jsonl"

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
lock_dir = "{self.root / 'locks'}"
policy = "{self.policy}"
snapshot_interval_s = 0.2
shutdown_grace_s = 2.0

[gpus]
simulated_device = "{self.device}"
simulated_log = "{self.root / 'sim.log'}"

[dispatcher]
slots_per_gpu = {self.slots}
kill_grace_s = 0.5

[tenants]
cgroups = "{self.cgroups}"
{self.extra_config}
"""
        )

    def start(self) -> Runtime:
        self.root.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self.proc = subprocess.Popen(
            [str(BIN / "krex-runtime"), "--config", str(self.config_path), "--sim", str(self.sim)],
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_until(self._answers, 30, "the runtime to answer")
        return self

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"runtime exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
        if not (self.run_dir / "control.sock").exists():
            return False
        try:
            with self.client(timeout_s=1.0) as c:
                c.call("hello")
            return True
        except Exception:
            return False

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KREX_RUN_DIR": str(self.run_dir)}

    def client(self, timeout_s: float = 10.0) -> ControlClient:
        return ControlClient(f"ipc://{self.run_dir / 'control.sock'}", timeout_s=timeout_s)

    def krex(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "krex"), *args], env=self.env, capture_output=True, text=True, timeout=timeout
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
            raise AssertionError("runtime did not stop within 60 s of SIGTERM")


def tenant_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes started by the runtime of `run_dir` (by their KREX_RUN_DIR)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("KREX_RUN_DIR") == str(run_dir) and proc.status() != psutil.STATUS_ZOMBIE:
                if "KREX_COMMAND_ID" in proc.environ():
                    found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def make_runtime(tmp_path: Path, native_built: Path) -> Iterator[Any]:
    """Start runtimes with `make_runtime(policy=..., slots=...)`; all are stopped and
    checked for leftovers at the end of the test."""
    started: list[Runtime] = []

    def make(name: str = "rt", **kwargs: Any) -> Runtime:
        rt = Runtime(tmp_path / name, **kwargs).start()
        started.append(rt)
        return rt

    yield make
    for rt in started:
        if rt.proc is not None and rt.proc.poll() is None:
            assert rt.stop() == 0, rt.log_path.read_text()
        leftovers = tenant_processes(rt.run_dir)
        for p in leftovers:
            p.kill()
        assert not leftovers, f"processes left behind: {leftovers}"
        Path(f"/dev/shm/krex-sim-{rt.device}").unlink(missing_ok=True)


@pytest.fixture
def runtime(make_runtime: Any) -> Runtime:
    return make_runtime()
