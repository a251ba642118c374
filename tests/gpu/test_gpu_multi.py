"""Regions over several GPUs on a real two-GPU machine: one runtime over both
GPUs, PyTorch tenants, the real driver. Skipped with fewer than two GPUs.

    make -C native all && python -m pytest -m gpu tests/gpu/test_gpu_multi.py -s -q

- a region on GPU 0 leaves GPU 1's tenants running (their interception
  counters move on GPU 1, not on GPU 0);
- a region over both GPUs (`--gpus 2`) holds back and freezes both GPUs' others;
- an NCCL all-reduce across both GPUs timed inside a 2-GPU region with busy
  tenants on both GPUs, against native (no KREX, no tenants) and against the
  same tenants without a region: a table (`-s` prints it).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest
from region_checks import check_nothing_left, check_one_holder_per_gpu, check_sets, regions_of
from runtime_helpers import (
    REPO,
    cgroup_root,
    finish,
    frozen_cgroups,
    gpu_state,
    output,
    regions_config,
    submit,
    trace_events,
    wait_ready,
)

from krex_runtime.regions.gate.core import Gate
from krex_runtime.testing.local_runtime import Runtime, wait_until

PY = sys.executable
TENANTS = REPO / "tests" / "tenants"


def _gpu_count() -> int:
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu_count() < 2, reason="needs two NVIDIA GPUs")]


def two_gpu_runtime(make_runtime) -> Runtime:
    return make_runtime(policy="krex", sim=0, slots=8, extra_config=regions_config("preload"))


def torch_busy(rt: Runtime, gpu: int) -> str:
    return submit(rt, PY, str(TENANTS / "torch_busy.py"), "4096", "4", gpu=gpu)


def others_calls(rt: Runtime, gpu: int, holder: int | None) -> int:
    """The interception counters of the GPU's tenants other than `holder`, as the gate shows them."""
    with Gate.attach(rt.run_dir / "gates" / f"gpu{gpu}.gate", writable=False) as gate:
        return sum(e.calls_total for e in gate.processes() if e.tenant_id != holder)


def holder_of(rt: Runtime, gpu: int) -> int | None:
    return gpu_state(rt, gpu)["region_holder"]


def test_a_region_on_gpu0_leaves_gpu1_running(make_runtime) -> None:
    rt = two_gpu_runtime(make_runtime)
    busy = [torch_busy(rt, 0), torch_busy(rt, 1)]
    wait_ready(rt, *busy)
    submit(rt, PY, str(TENANTS / "torch_regions.py"), "--regions", "1", "--n", "2048", "--hold-s", "4", gpu=0)
    wait_until(lambda: holder_of(rt, 0) is not None, 120, "GPU 0's region")
    holder = holder_of(rt, 0)
    time.sleep(0.5)
    before = (others_calls(rt, 0, holder), others_calls(rt, 1, None))
    time.sleep(2.0)
    after = (others_calls(rt, 0, holder), others_calls(rt, 1, None))
    print(f"\ncalls of the others during a GPU 0 region: GPU 0 {before[0]} -> {after[0]}, GPU 1 {before[1]} -> {after[1]}")
    assert holder_of(rt, 0) == holder and holder_of(rt, 1) is None
    assert after[0] == before[0], "GPU 0's other tenant submitted inside GPU 0's region"
    assert after[1] > before[1], "GPU 1's tenant was held back by a region on GPU 0"
    finish(rt, *busy)
    check_nothing_left(rt.run_dir)


def test_a_two_gpu_region_holds_back_and_freezes_both(make_runtime) -> None:
    rt = two_gpu_runtime(make_runtime)
    busy = [torch_busy(rt, 0), torch_busy(rt, 1)]
    wait_ready(rt, *busy)
    done = rt.krex("submit", "--gpus", "2", "--", PY, str(TENANTS / "torch_nccl.py"), "--repeats", "1500", "--mib", "512")
    assert done.returncode == 0, done.stderr
    holder_id = done.stdout.strip()
    wait_until(lambda: holder_of(rt, 0) is not None and holder_of(rt, 1) is not None, 180, "both GPUs held")
    holder = holder_of(rt, 0)
    assert holder_of(rt, 1) == holder
    assert gpu_state(rt, 0)["region_seq"] == gpu_state(rt, 1)["region_seq"]
    before = (others_calls(rt, 0, holder), others_calls(rt, 1, holder))
    frozen = frozen_cgroups(cgroup_root(rt))
    time.sleep(0.5)
    after = (others_calls(rt, 0, holder), others_calls(rt, 1, holder))
    print(f"\ncalls of the others during a 2-GPU region: {before} -> {after}; frozen: {frozen}")
    assert holder_of(rt, 0) == holder and holder_of(rt, 1) == holder, "the region ended before the second reading"
    assert after == before
    assert sorted(frozen) == sorted(f"cmd-{c}" for c in busy)
    result = json.loads(rt.krex("wait", "--json", holder_id, timeout=600).stdout)
    assert result["state"] == "finished" and result["gpus"] == [0, 1]
    finish(rt, *busy)
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    assert check_sets(events, held) >= 1
    check_one_holder_per_gpu(events)
    assert {e["verdict"] for e in trace_events(rt, "region_released") if e.get("gpus")} == {"verified"}


def _nccl(argv_prefix: list[str], extra: list[str], env: dict[str, str] | None = None) -> list[float]:
    done = subprocess.run([*argv_prefix, PY, str(TENANTS / "torch_nccl.py"), *extra], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("{"))
    record = json.loads(line)
    assert "error" not in record, record
    return record["times_ms"]


def _row(name: str, times: list[float], native_p50: float | None) -> str:
    p50 = statistics.median(times)
    p95 = sorted(times)[int(0.95 * (len(times) - 1))]
    vs = f"{100 * (p50 / native_p50 - 1):+.1f}%" if native_p50 else "-"
    return f"| {name} | {len(times)} | {p50:.3f} | {p95:.3f} | {vs} |"


def test_nccl_all_reduce_in_a_two_gpu_region_against_native(make_runtime) -> None:
    size = ["--mib", "256", "--repeats", "50"]
    # Native: no runtime, no tenants, no interception library.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}
    env["PYTHONPATH"] = str(REPO)
    native = _nccl([], size, env)
    rt = two_gpu_runtime(make_runtime)
    busy = [torch_busy(rt, 0), torch_busy(rt, 0), torch_busy(rt, 1), torch_busy(rt, 1)]
    wait_ready(rt, *busy)
    krex = rt.krex("run", "--json", "--gpus", "2", "--", PY, str(TENANTS / "torch_nccl.py"), *size, timeout=600)
    assert krex.returncode == 0, krex.stderr
    result = json.loads(krex.stdout)
    in_region = json.loads(next(x for x in output(rt, result["id"]).splitlines() if x.startswith("{")))["times_ms"]
    assert {r["verdict"] for r in result["regions"]} == {"verified"}, result["regions"]
    assert sorted(r["gpu"] for r in result["regions"]) == [0, 1] and len({r["region"] for r in result["regions"]}) == 1
    shared = rt.krex("run", "--json", "--gpus", "2", "--", PY, str(TENANTS / "torch_nccl.py"), *size, "--no-region",
                     timeout=600)
    assert shared.returncode == 0, shared.stderr
    unprotected = json.loads(next(x for x in output(rt, json.loads(shared.stdout)["id"]).splitlines()
                                  if x.startswith("{")))["times_ms"]
    finish(rt, *busy)
    check_nothing_left(rt.run_dir)
    base = statistics.median(native)
    table = [
        "| NCCL all-reduce, 256 MiB per GPU, 2 GPUs | n | p50 ms | p95 ms | p50 vs native |",
        "|---|---|---|---|---|",
        _row("native (no KREX, no tenants)", native, None),
        _row("KREX, 2-GPU region, 2 busy tenants per GPU", in_region, base),
        _row("KREX, no region, 2 busy tenants per GPU", unprotected, base),
    ]
    print("\n" + "\n".join(table))  # the figures for docs/BENCHMARKS.md (no timing is asserted)
    assert all(t > 0 for t in in_region + unprotected + native)
