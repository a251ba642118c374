"""A program linked with -lcuda is intercepted through the library's direct
definitions (symbol interposition), and the library counts what it saw."""

from __future__ import annotations

import subprocess
from pathlib import Path

from krex_native import Build, check_sanitizers, read_stats

from krex_runtime.sim.device_file import remove_device


def run_linked(build: Build, tmp_path: Path, threads: int, iterations: int, **env: str):
    device = f"krex-linked-{tmp_path.name}"
    stats = tmp_path / "stats.jsonl"
    try:
        proc = subprocess.run(
            [str(build.tool("linked_tenant")), str(threads), str(iterations), "1000", "4"],
            capture_output=True, text=True, timeout=120,
            env=build.env(KREX_SIM_DEVICE=device, KREX_INTERCEPT_STATS=str(stats), **env),
        )
    finally:
        remove_device(device)
    check_sanitizers(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    return proc, read_stats(stats)


def test_linked_program_is_intercepted(build: Build, tmp_path: Path) -> None:
    proc, stats = run_linked(build, tmp_path, threads=4, iterations=25)
    assert proc.stdout.split()[-1] == "100"
    assert len(stats) == 1
    calls = stats[0]["calls"]
    # threads 0 and 3 use cuLaunchKernel (3 via the pointer cuGetProcAddress returned),
    # thread 1 cuLaunchKernel_ptsz, thread 2 cuLaunchKernelEx
    assert calls["cuLaunchKernel"] == 50
    assert calls["cuLaunchKernel_ptsz"] == 25
    assert calls["cuLaunchKernelEx"] == 25
    assert stats[0]["classes"]["launch"] == 100
    assert calls["cuMemcpyHtoD_v2"] == 1 and calls["cuMemsetD8_v2"] == 1
    assert calls["cuModuleLoadData"] == 1 and calls["cuDevicePrimaryCtxRetain"] == 1
    assert stats[0]["events"]["unmapped"] == 0


def test_not_preloaded_means_not_counted(build: Build, tmp_path: Path) -> None:
    env = build.env(preload=False)
    device = f"krex-linked-np-{tmp_path.name}"
    stats = tmp_path / "stats.jsonl"
    env.update(KREX_SIM_DEVICE=device, KREX_INTERCEPT_STATS=str(stats))
    try:
        proc = subprocess.run([str(build.tool("linked_tenant")), "1", "3", "1000"], env=env,
                              capture_output=True, text=True, timeout=120)
    finally:
        remove_device(device)
    assert proc.returncode == 0, proc.stderr
    assert read_stats(stats) == []


def test_stats_path_takes_the_pid(normal_build: Build, tmp_path: Path) -> None:
    device = f"krex-linked-pid-{tmp_path.name}"
    try:
        proc = subprocess.run(
            [str(normal_build.tool("linked_tenant")), "1", "2", "1000"], capture_output=True, text=True,
            timeout=120,
            env=normal_build.env(KREX_SIM_DEVICE=device, KREX_INTERCEPT_STATS=str(tmp_path / "s-%p.json")),
        )
    finally:
        remove_device(device)
    assert proc.returncode == 0
    files = list(tmp_path.glob("s-*.json"))
    assert len(files) == 1
    stats = read_stats(files[0])
    assert files[0].name == f"s-{stats[0]['pid']}.json"
    assert stats[0]["classes"]["launch"] == 2
