"""Fixtures that start real runtimes (simulated GPUs) and real CLI processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import REPO, Answer, FakeRuntime, steady_cores, tenant_processes

from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.node import native_build
from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until

# Nothing a test starts may meet what a user or another runtime on this
# machine holds: a client that names no runtime looks in this run's own
# folder (where none serves), never the system default's, and a runtime
# started without a run dir or simulated device of its own gets both from it
# (config.resolve_simulated_device). One per test process (each xdist worker).
_ISOLATED = Path(tempfile.mkdtemp(prefix="krex-tests-"))
os.environ["KREX_RUN_DIR"] = str(_ISOLATED / "run")
for _name in ("KREX_ENDPOINT", "KREX_CONFIG", "KREX_DEMO_DIR"):
    os.environ.pop(_name, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_ISOLATED, ignore_errors=True)


def _signal_state() -> tuple[object, frozenset[int]]:
    """How this process takes SIGINT and which signals it blocks: both are
    inherited by every process a test starts (a child started with SIGINT
    blocked or ignored never sees a Ctrl-C)."""
    return signal.getsignal(signal.SIGINT), frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, []))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SIGNALS] = _signal_state()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    before = item.stash.get(_SIGNALS, None)
    after = _signal_state()
    if before is None or after == before:
        return
    handler, mask = before
    signal.signal(signal.SIGINT, handler)  # type: ignore[arg-type]
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    raise AssertionError(f"{item.nodeid} left this process's signals changed: SIGINT {after[0]!r} "
                         f"(was {handler!r}), blocked {sorted(after[1])} (was {sorted(mask)}); restored")


_SIGNALS = pytest.StashKey[tuple[object, frozenset[int]]]()


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
    """Build native/ once per test session (the README's test command did too),
    with the C region client that tenants in the region tests run."""
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "all", "build/tests/region_client"], check=True)
    lib = native_build.interception_library()
    assert lib.exists(), f"make did not produce {lib}"
    return lib


@pytest.fixture
def make_runtime(tmp_path: Path, native_built: Path) -> Iterator[Any]:
    """Start runtimes with `make_runtime(policy=..., slots=...)`; all are stopped at
    the end of the test, and each one that stopped cleanly must have left nothing
    on the node (processes, cgroups, gates, sockets, held locks, shared memory).
    `parent` puts the runtime's folder elsewhere than the test's own (which only
    root may enter)."""
    started: list[Runtime] = []
    fds: dict[int, dict[int, str]] = {}  # runtime pid -> its descriptors once it answered
    before = hygiene.baseline()

    def make(name: str = "rt", parent: Path | None = None, **kwargs: Any) -> Runtime:
        kwargs["extra_config"] = steady_cores(kwargs.get("extra_config", ""))
        rt = Runtime((parent or tmp_path) / name, **kwargs).start()
        started.append(rt)
        assert rt.proc is not None
        fds[rt.proc.pid] = hygiene.open_fds(rt.proc.pid)
        return rt

    yield make
    problems = []
    for rt in started:
        if rt.proc is not None and rt.proc.poll() is None and rt.proc.pid in fds:
            try:
                problems += [f"{rt.root.name}: {line}" for line in _idle_hygiene(rt, fds[rt.proc.pid])]
            except Exception as exc:  # a check that cannot run must still let the runtime be stopped
                problems.append(f"{rt.root.name}: its idle state could not be checked: {exc!r}")
        if rt.proc is not None and rt.proc.poll() is None and rt.stop() != 0:
            problems.append(f"{rt.root.name}: runtime did not stop cleanly:\n{rt.log_path.read_text()}")
        orphans = tenant_processes(rt.run_dir)
        for p in orphans:
            p.kill()
        if orphans:
            problems.append(f"{rt.root.name}: processes left behind: {orphans}")
        remove_device(rt.device)
    for rt in started:
        if rt.proc is not None and rt.proc.returncode == 0:
            problems += [f"{rt.root.name}: {line}" for line in hygiene.leftovers(rt.run_dir, rt.lock_dir, before)]
        for version in (2, 1):  # a runtime killed on purpose leaves its slice
            leftover_slice = CgroupSlice.open(rt.run_dir, version)
            if leftover_slice is not None:
                leftover_slice.remove()
    assert not problems, "\n".join(problems)


def _idle_hygiene(rt: Runtime, fds_at_start: dict[int, str]) -> list[str]:
    """A runtime the test left idle (nothing running or queued) holds nothing
    back and has no more descriptors than when it started (where it has no
    context pool, zygotes or context servers: they start after the runtime,
    with channels and pidfds of their own; test_pool checks its descriptors
    once warm)."""
    with rt.client() as c:
        status = c.call("status")
    if status["queued"] or any(g["running"] for g in status["gpus"]):
        return []
    assert rt.proc is not None
    pid = rt.proc.pid
    servers = tomllib.loads(rt.config_path.read_text()).get("forward", {}).get("servers_per_gpu", 0)
    pooled = servers > 0 or any(g["pool_size"] or g["zygote"] for g in status["gpus"])
    try:
        wait_until(lambda: not hygiene.held_back(rt.run_dir), 10, "nothing held back")
        wait_until(lambda: pooled or not hygiene.grown_fds(pid, fds_at_start), 10, "descriptors back")
    except AssertionError:
        return hygiene.held_back(rt.run_dir) + ([] if pooled else hygiene.grown_fds(pid, fds_at_start))
    return []


@pytest.fixture
def runtime(make_runtime: Any) -> Runtime:
    return make_runtime()


@pytest.fixture
def fake_runtime(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start fake runtimes with `fake_runtime(answer)`: a control socket that
    answers each request as `answer` says (runtime_helpers.FakeRuntime); its
    endpoint. All are stopped at the end of the test."""
    started: list[FakeRuntime] = []

    def start(answer: Answer, pings_too: bool = False) -> str:
        endpoint = f"ipc://{tmp_path / f'fake{len(started)}.sock'}"
        server = FakeRuntime(endpoint, answer, pings_too)
        server.start()
        started.append(server)
        return endpoint

    yield start
    for server in started:
        server.stop.set()
        server.join()
