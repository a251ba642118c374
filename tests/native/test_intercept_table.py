"""The generated table of gated entry points is up to date with cuda.h."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from krex_native import NATIVE, REPO

CUDA_INCLUDE = os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include")
TABLE = NATIVE / "src" / "intercept" / "intercept_gated_table.c"


@pytest.mark.skipif(not Path(CUDA_INCLUDE, "cuda.h").exists(), reason="no cuda.h")
def test_generated_table_is_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(NATIVE / "tools" / "gen_gated_table.py"), "--check", "--cuda-include", CUDA_INCLUDE],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr


def table_names(tracked: bool = False) -> list[str]:
    """The gated entry points of the table (tracked: those watched, not gated)."""
    klass = "KREX_CLASS_TRACKED" if tracked else r"KREX_CLASS_(?!TRACKED)"
    return re.findall(r'^    \{"(cu\w+)", ' + klass, TABLE.read_text(), re.MULTILINE)


def test_event_timing_is_tracked_in_every_version_not_gated() -> None:
    tracked = sorted(table_names(tracked=True))
    assert tracked[:4] == ["cuCtxSynchronize", "cuCtxSynchronize_v2", "cuEventDestroy", "cuEventDestroy_v2"]
    assert {"cuEventElapsedTime", "cuEventElapsedTime_v2", "cuEventSynchronize", "cuEventQuery",
            "cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuStreamQuery", "cuStreamQuery_ptsz"} <= set(tracked)
    text = TABLE.read_text()
    for record in ("cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz"):
        body = text.split(f"CUresult CUDAAPI {record}(", 1)[1].split("\n}", 1)[0]
        assert "krex_gate_enter" in body and "krex_event_recorded(hEvent, hStream, " in body, record


def test_table_covers_every_submission_family() -> None:
    names = set(table_names())
    for must in (
        "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
        "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernelMultiDevice", "cuLaunchHostFunc",
        "cuStreamAddCallback", "cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync",
        "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphUpload",
        "cuMemcpy", "cuMemcpyAsync_ptsz", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoD",
        "cuMemcpy3DPeerAsync", "cuMemcpyBatchAsync_v2", "cuMemsetD8_v2", "cuMemsetD2D32Async",
        "cuEventRecord", "cuEventRecordWithFlags_ptsz", "cuStreamWaitEvent", "cuStreamWaitValue32_v2",
        "cuStreamWriteValue64", "cuStreamBatchMemOp_v2", "cuMemAllocAsync", "cuMemFreeAsync_ptsz",
        "cuMemAllocFromPoolAsync", "cuMemPrefetchAsync_v2", "cuCtxCreate_v4", "cuDevicePrimaryCtxRetain",
        "cuModuleLoadData", "cuModuleLoadDataEx", "cuLibraryLoadData", "cuModuleGetFunction",
        "cuKernelGetFunction", "cuFuncLoad",
        # Memory outside stream order and context teardown: their driver work slowed holders' trials.
        "cuMemAlloc_v2", "cuMemFree_v2", "cuMemHostAlloc", "cuMemHostRegister_v2", "cuMemCreate", "cuMemMap",
    ):
        assert must in names, must
    # Host waits are tracked (measurement integrity), never gated.
    for never in ("cuGetProcAddress", "cuGetExportTable", "cuCtxSynchronize", "cuStreamSynchronize",
                  "cuMemGetInfo_v2", "cuInit", "cuCtxDestroy_v2", "cuDevicePrimaryCtxRelease_v2"):
        assert never not in names, never


def test_docs_state_the_table_size() -> None:
    n = len(table_names())
    header = re.search(r"(\d+) gated entry points", TABLE.read_text())
    assert header and int(header.group(1)) == n
    assert f"{n} gated entry points" in (REPO / "docs" / "native.md").read_text()


def test_kernel_and_graph_launches_feed_measurement_integrity() -> None:
    """Every kernel and graph launch, and every join (stream wait, host wait),
    reaches intercept_integrity.c with its stream; per-thread variants say so.
    (The simulator has no graphs: cuGraphLaunch's hook is checked here.)"""
    text = TABLE.read_text()

    def body(name: str) -> str:
        return text.split(f"CUresult CUDAAPI {name}(", 1)[1].split("\n}", 1)[0]

    for name, call in (
        ("cuLaunchKernel", "krex_integrity_launch(hStream, 0)"),
        ("cuLaunchKernel_ptsz", "krex_integrity_launch(hStream, 1)"),
        ("cuLaunchKernelEx", "krex_integrity_launch((config != NULL ? config->hStream : NULL), 0)"),
        ("cuLaunchCooperativeKernel", "krex_integrity_launch(hStream, 0)"),
        ("cuGraphLaunch", "krex_integrity_launch(hStream, 0)"),
        ("cuGraphLaunch_ptsz", "krex_integrity_launch(hStream, 1)"),
        ("cuStreamWaitEvent", "krex_integrity_wait(hStream, hEvent, 0)"),
        ("cuStreamSynchronize_ptsz", "krex_integrity_sync_stream(hStream, 1)"),
        ("cuCtxSynchronize", "krex_integrity_sync_all()"),
        ("cuEventQuery", "krex_integrity_sync_event(hEvent)"),
    ):
        assert f"if (r == CUDA_SUCCESS && outer) {call};" in body(name), name
    for name in ("cuGraphUpload", "cuLaunchHostFunc", "cuMemcpyAsync"):
        assert "krex_integrity_launch" not in body(name), name
