"""Forwarded mode's CUDA runtime (native/src/cudart) over the simulated driver
in the command's own process, in the normal and the ASan/UBSan build: a C
program on the runtime API registers a fatbinary and its kernel as nvcc's
host code does, and the runtime's driver calls reach the interception
library (tests/commands/test_forwarded.py runs the same program forwarded)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from krex_native import VARIANTS, Build, check_sanitizers, make, read_stats

from krex_runtime.sim.device_file import remove_device


@pytest.fixture(scope="module")
def cudart_builds(builds: dict[str, Build]) -> dict[str, Build]:
    for variant in VARIANTS:
        make("cudart-tests", asan=variant == "asan")
    return builds


def run_tenant(build: Build, tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    device = f"krex-cudart-{tmp_path.name}"
    stats = tmp_path / "stats.jsonl"
    try:
        proc = subprocess.run(
            [str(build.tool("cudart_tenant")), *argv], capture_output=True, text=True, timeout=120,
            env=build.env(KREX_SIM_DEVICE=device, KREX_INTERCEPT_STATS=str(stats)),
        )
    finally:
        remove_device(device)
    check_sanitizers(proc.stderr)
    return proc, read_stats(stats)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_runtime_program_runs_on_the_driver_calls(cudart_builds: dict[str, Build], variant: str,
                                                    tmp_path: Path) -> None:
    proc, stats = run_tenant(cudart_builds[variant], tmp_path, "work")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("devices 1, device 0, runtime ") and lines[0].endswith("memory yes, a name yes")
    assert lines[1:] == [
        "kernels counted 21",
        lines[2],  # the checksum: compared across modes by tests/commands/test_forwarded.py
        "event timing covers the kernel",
        "event query done",
        "unregistered launch: cudaErrorInvalidDeviceFunction, peeked cudaErrorInvalidDeviceFunction, "
        "last cudaErrorInvalidDeviceFunction, then cudaSuccess",
        "after reset counted 1",
        "done",
    ]
    assert lines[2].endswith("async copy intact")
    calls = stats[0]["calls"]
    # 21 counted launches, the timed one and the one after the reset; the
    # unregistered launch never reaches the driver.
    assert calls["cuLaunchKernel"] == 23
    # Loaded lazily once, and again after cudaDeviceReset; a function looked up
    # once per registered stub (two before the reset, one launched after it).
    assert calls["cuModuleLoadData"] == 2 and calls["cuModuleGetFunction"] == 3
    assert calls["cuEventElapsedTime_v2"] == 1 and calls["cuDevicePrimaryCtxRetain"] == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_graph_captured_through_the_runtime_replays_on_the_driver(cudart_builds: dict[str, Build], variant: str,
                                                                    tmp_path: Path) -> None:
    proc, stats = run_tenant(cudart_builds[variant], tmp_path, "capture")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "capturing yes, counted 0 before the replays",
        "replayed 3 times: counted 6, copy and memset intact",
    ]
    # The replays are gated launches; capturing is host-side work the
    # interception library lets through uncounted (a captured launch counts
    # as the launch call it is).
    calls = stats[0]["calls"]
    assert calls["cuGraphLaunch"] == 3 and calls["cuLaunchKernel"] == 2, calls
    assert not any("Capture" in name or "Instantiate" in name for name in calls), calls


def test_a_runtime_call_it_does_not_implement_is_named(cudart_builds: dict[str, Build], tmp_path: Path) -> None:
    proc, _ = run_tenant(cudart_builds["normal"], tmp_path, "unknown")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "cudaMallocManaged: cudaErrorNotSupported\n"
    assert proc.stderr.startswith("krex cudart: cudaMallocManaged is not implemented by forwarded mode's CUDA runtime")
