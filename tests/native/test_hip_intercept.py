"""The HIP interception library (libkrex_hip.so) on the simulated HIP runtime:
a C program linked with libamdhip64 is intercepted through every launch form
(symbol interposition, the C++-linkage hipExtModuleLaunchKernel, a pointer
from hipGetProcAddress), a Python program calling HIP through ctypes through
the exported dlsym, and the generated table is up to date with the headers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from krex_native import NATIVE, REPO, Build, check_sanitizers, make, read_stats

from krex_runtime.sim.device_file import remove_device

HIP_INCLUDE = os.environ.get("HIP_INCLUDE", "/usr/include")
TABLE = NATIVE / "src" / "hip_intercept" / "hip_gated_table.c"


def hip_env(build: Build, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = build.env(**extra)
    libs = env["LD_PRELOAD"].split()
    env["LD_PRELOAD"] = " ".join(str(build.root / "libkrex_hip.so") if Path(p) == build.libkrex else p for p in libs)
    env["KREX_SIM_DEVICE"] = f"krex-hip-{tmp_path.name}"
    return env


@pytest.fixture(scope="module")
def hip_built(builds: dict[str, Build]) -> dict[str, Build]:
    for variant in builds:
        make("hip-tests", asan=variant == "asan")
    return builds


@pytest.mark.parametrize("variant", ["normal", "asan"])
def test_every_hip_launch_form_is_intercepted(hip_built: dict[str, Build], tmp_path: Path, variant: str) -> None:
    build = hip_built[variant]
    stats = tmp_path / "stats.jsonl"
    env = hip_env(build, tmp_path, KREX_INTERCEPT_STATS=str(stats))
    try:
        done = subprocess.run([str(build.tool("hip_tenant")), "launches", "4"], env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        remove_device(env["KREX_SIM_DEVICE"])
    check_sanitizers(done.stderr)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "20"  # 5 forms x 4 rounds, all completed
    calls = read_stats(stats)[0]["calls"]
    assert calls["hipModuleLaunchKernel"] == 4 and calls["hipExtLaunchKernel"] == 4
    assert calls["hipLaunchKernel"] == 8  # 4 direct, 4 through the pointer hipGetProcAddress handed out
    assert calls[next(n for n in calls if n.startswith("_Z24hipExtModuleLaunchKernel"))] == 4
    assert read_stats(stats)[0]["classes"]["launch"] == 20
    assert read_stats(stats)[0]["events"]["swapped"] == 1 and read_stats(stats)[0]["events"]["unmapped"] == 0
    # HIP's initialisation went through the gate as a context-class call.
    assert calls["hipInit"] >= 1 and read_stats(stats)[0]["classes"]["context"] >= 1


def test_a_python_tenant_calling_hip_through_ctypes_is_intercepted(hip_built: dict[str, Build],
                                                                 tmp_path: Path) -> None:
    stats = tmp_path / "stats.jsonl"
    env = hip_env(hip_built["normal"], tmp_path, KREX_INTERCEPT_STATS=str(stats))
    script = ("from krex_runtime.sim.simhip import SimHip\n"
              "h = SimHip(); c = h.counter()\n"
              "print(h.time_kernel(200000, repeats=3, stream=h.stream()))\n"
              "for _ in range(5): h.launch(1000, counter=c)\n"
              "h.synchronize(); print(h.read_u64(c))\n")
    try:
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    finally:
        remove_device(env["KREX_SIM_DEVICE"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "5"
    record = read_stats(stats)[0]
    assert record["calls"]["hipModuleLaunchKernel"] == 8 and record["calls"]["hipEventRecord"] == 6
    assert record["calls"]["hipEventElapsedTime"] == 3


@pytest.mark.skipif(not Path(HIP_INCLUDE, "hip", "hip_runtime_api.h").exists() or shutil.which("c++") is None,
                    reason="no HIP headers or C++ compiler")
def test_generated_hip_table_is_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(NATIVE / "tools" / "gen_hip_gated_table.py"), "--check", "--hip-include", HIP_INCLUDE],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr


def test_hip_table_covers_every_submission_family() -> None:
    text = TABLE.read_text()
    gated = set(re.findall(r'^    \{"(\w+)", KREX_CLASS_(?!TRACKED)', text, re.MULTILINE))
    tracked = set(re.findall(r'^    \{"(\w+)", KREX_CLASS_TRACKED', text, re.MULTILINE))
    for must in ("hipLaunchKernel", "hipLaunchKernel_spt", "hipModuleLaunchKernel", "hipExtLaunchKernel",
                 "hipLaunchCooperativeKernel", "hipLaunchHostFunc", "hipGraphLaunch", "hipMemcpy", "hipMemcpyAsync",
                 "hipMemcpyHtoD", "hipMemset", "hipMemsetAsync", "hipMemsetD32Async", "hipEventRecord",
                 "hipStreamWaitEvent", "hipStreamWriteValue32", "hipMallocAsync", "hipModuleLoadData", "hipInit"):
        assert must in gated, must
    assert any(n.startswith("_Z24hipExtModuleLaunchKernel") for n in gated)
    assert {"hipEventElapsedTime", "hipEventDestroy", "hipStreamSynchronize", "hipDeviceSynchronize"} <= tracked
    header = re.search(r"(\d+) gated HIP entry points", text)
    assert header and int(header.group(1)) == len(gated)
    assert f"{len(gated)} gated HIP entry points" in (REPO / "docs" / "native.md").read_text()
