"""Every resolver hands out wrappers for gated entry points, and only for them.

resolver_probe resolves driver functions through dlsym and cuGetProcAddress
and prints which object each returned pointer lies in.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from krex_native import Build, check_sanitizers

from krex_runtime.sim.device_file import remove_device


@pytest.fixture
def probe(build: Build, tmp_path: Path) -> dict[tuple[str, str], list[str]]:
    device = f"krex-probe-{tmp_path.name}"
    try:
        proc = subprocess.run([str(build.tool("resolver_probe"))], capture_output=True, text=True, timeout=120,
                              env=build.env(KREX_SIM_DEVICE=device))
    finally:
        remove_device(device)
    check_sanitizers(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    return {(w[0], w[1]): w[2:] for w in (line.split() for line in proc.stdout.splitlines())}


def test_dlsym_swaps_gated_entry_points(probe) -> None:
    for name in ("cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuMemcpyHtoD_v2",
                 "cuMemcpyHtoDAsync_v2_ptsz", "cuGraphLaunch", "cuEventRecord", "cuModuleLoadData"):
        assert probe[("dlsym", name)] == ["krex"], name
    assert probe[("dlsym-default", "cuLaunchKernel")] == ["krex"]


def test_resolvers_are_wrapped_and_others_untouched(probe) -> None:
    assert probe[("dlsym", "cuGetProcAddress")] == ["krex"]
    assert probe[("dlsym", "cuGetProcAddress_v2")] == ["krex"]
    assert probe[("dlsym", "cuGetExportTable")] == ["driver"]
    assert probe[("dlsym", "cuDeviceGet")] == ["driver"]
    # host waits are tracked (measurement integrity), so they are swapped too
    assert probe[("dlsym", "cuCtxSynchronize")] == ["krex"]
    assert probe[("dlsym-default", "strlen")] == ["other"]


def test_cu_get_proc_address_swaps_by_identity(probe) -> None:
    # asking cuGetProcAddress for itself returns the wrapper (how cudart finds everything)
    assert probe[("getproc", "cuGetProcAddress")] == ["krex"]
    assert probe[("getproc", "cuLaunchKernel")] == ["krex"]
    assert probe[("getproc", "cuMemcpyHtoD")] == ["krex"]
    assert probe[("getproc", "cuCtxSynchronize")] == ["krex"]  # tracked: a host wait joins streams
    assert probe[("getproc", "cuStreamSynchronize")] == ["krex"]
    assert probe[("getproc", "cuDeviceGet")] == ["driver"]
    assert probe[("getproc", "cuGetExportTable")] in (["driver"], ["error"])
    # the per-thread-default-stream flag yields the _ptsz variant, mapped to its own wrapper
    assert probe[("getproc-ptsz", "cuLaunchKernel")] == ["krex", "cuLaunchKernel_ptsz"]
    assert probe[("getproc-nested", "cuLaunchKernelEx")] == ["krex"]
    assert probe[("getproc-v1", "cuMemsetD8")] == ["krex"]
