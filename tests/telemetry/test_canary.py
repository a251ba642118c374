"""Telemetry on simulated GPUs: the canary's inflation estimate, metrics with
injected failures, flags for throttled regions, and replay of it all."""

from __future__ import annotations

import sys

import pytest
from runtime_helpers import REPO, busy, wait_ready

from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.trace.jsonl import read_trace

PY = sys.executable
TENANTS = REPO / "tests" / "tenants"
METRICS = ("util_pct", "mem_used", "mem_total", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "throttle")


def gpu0(rt: Runtime) -> dict:
    with rt.client() as c:
        return c.call("snapshot")["state"]["gpus"][0]


def busy_tenants(rt: Runtime, n: int) -> list[str]:
    return [busy(rt, gpu=0, kernel_us=2000, depth=4) for _ in range(n)]


def canary_after(rt: Runtime, samples: int) -> dict:
    wait_until(lambda: gpu0(rt)["canary"].get("samples", 0) >= samples, 120, f"{samples} canary samples")
    return gpu0(rt)["canary"]


def canary_under_load(rt: Runtime, tenants: int, samples: int) -> dict:
    """The canary's window over only the samples taken once `tenants` busy
    tenants all run kernels. The canary samples from the runtime's start, and a
    slow host can take seconds to start a tenant: samples from before would
    show an idle GPU and dilute what sharing costs. The state is the same
    reducer's, fed the trace with the earlier samples left out."""
    ids = busy_tenants(rt, tenants)
    wait_ready(rt, *ids)
    with rt.client() as c:
        since = c.call("snapshot")["seq"]

    def replayed() -> dict:
        state = node_state.NodeState()
        for event in read_trace(rt.trace_path).events:
            if event["type"] != "canary_sample" or event["seq"] > since:
                node_state.apply(state, event)
        return node_state.to_snapshot(state)["gpus"][0]["canary"]

    return wait_until(lambda: (c := replayed())["samples"] >= samples and c, 120, f"{samples} canary samples under load",
                      interval_s=0.5)


@pytest.mark.serial
def test_canary_is_near_zero_under_krex_and_positive_under_ungated(make_runtime) -> None:
    protected = make_runtime("krex", policy="krex", sim=1, slots=8, canary=True)
    canary = canary_under_load(protected, 6, 12)
    print("krex:", {k: v for k, v in canary.items() if not isinstance(v, list)})
    # Near zero against the >100% outside regions and under ungated; on the
    # simulator host CPU load shows as inflation too (0.02 here when quiet,
    # 0.075 seen right after a parallel test run), so the bound is loose.
    assert canary["inside_p50"] < 0.25
    assert canary["outside_p50"] > 1.0  # the same kernels outside a region: what sharing costs
    assert canary["contention"] > 2.0
    protected.stop()

    shared = make_runtime("ungated", policy="ungated", sim=1, slots=8, canary=True)
    canary = canary_under_load(shared, 6, 12)
    print("ungated:", {k: v for k, v in canary.items() if not isinstance(v, list)})
    assert canary["inside_p50"] > 1.0  # no region protects it here


def test_metrics_are_published_and_simulated_is_labelled(make_runtime) -> None:
    rt = make_runtime(policy="krex", sim=1)
    wait_until(lambda: gpu0(rt)["telemetry"], 30, "a telemetry sample")
    telemetry = gpu0(rt)["telemetry"]
    assert telemetry["simulated"] is True
    assert all(telemetry[m] is not None for m in METRICS)
    assert gpu0(rt)["parked"] == 0 and gpu0(rt)["draining"] == 0


def test_injected_metric_failures_show_na_and_the_service_runs_on(make_runtime) -> None:
    rt = make_runtime(policy="krex", sim=1, canary=True, runtime_env={"KREX_TELEMETRY_FAULTS": "sm_clock_mhz,temp_c"})
    wait_until(lambda: gpu0(rt)["telemetry"], 30, "a telemetry sample")
    telemetry = gpu0(rt)["telemetry"]
    assert telemetry["sm_clock_mhz"] is None and telemetry["temp_c"] is None
    assert telemetry["power_w"] is not None
    canary_after(rt, 2)
    assert rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "1").returncode == 0
    status = rt.krex("status")
    assert status.returncode == 0 and "KREX simulated GPU" in status.stdout

    everything = make_runtime("all", policy="krex", sim=1, runtime_env={"KREX_TELEMETRY_FAULTS": "all"})
    wait_until(lambda: gpu0(everything)["telemetry"], 30, "a telemetry sample")
    assert all(gpu0(everything)["telemetry"][m] is None for m in METRICS)
    assert everything.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "1").returncode == 0


def test_throttled_region_is_flagged_to_its_tenant_and_in_the_trace(make_runtime) -> None:
    rt = make_runtime(policy="krex", sim=1, runtime_env={"KREX_SIM_THROTTLE": "hw_thermal"})
    script = "from krex_runtime.client import region\nwith region() as r:\n    print(','.join(r.flags))\n"
    done = rt.krex("run", "--", PY, "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "throttled:hw_thermal"
    rt.stop()
    granted = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_granted"]
    assert granted[-1]["flags"] == ["throttled:hw_thermal"] and granted[-1]["sm_clock_mhz"] == 1980


def test_replay_shows_what_the_live_state_showed(make_runtime) -> None:
    rt = make_runtime(policy="krex", sim=1, slots=8, canary=True)
    busy_tenants(rt, 3)
    canary_after(rt, 4)
    with rt.client() as c:
        live = c.call("snapshot")
    state = node_state.NodeState()
    for event in read_trace(rt.trace_path).events:
        if event["seq"] > live["seq"]:
            break
        node_state.apply(state, event)
    replayed = node_state.to_snapshot(state)["gpus"][0]
    shown = live["state"]["gpus"][0]
    for key in ("telemetry", "canary", "parked", "draining", "last_region", "regions_granted"):
        assert replayed[key] == shown[key], key


def test_the_baseline_is_the_least_of_a_few_medians() -> None:
    """A baseline taken while the host hiccups (every canary starting at once,
    on the simulator a late wake-up) would understate every later inflation:
    interference only lengthens a timing, so the least of a few rounds is the
    idle GPU's."""
    from krex_runtime.tenant.canary import baseline_of

    class Kernels:
        def __init__(self) -> None:
            self.compute_times = iter([3.2, 1.0, 1.1])
            self.memory_times = iter([1.0, 2.9, 1.05])

        def compute(self) -> float:
            return next(self.compute_times)

        def memory(self) -> float:
            return next(self.memory_times)

    assert baseline_of(Kernels()) == {"compute_ms": 1.0, "memory_ms": 1.0}


def test_every_gpu_of_a_runtime_serving_more_than_the_device_file_had_gets_its_canary(make_runtime) -> None:
    """`krex-runtime --sim 3` after a 2-GPU runtime left its simulated device:
    GPU 2's canary (a tenant like any other) must not fail cuInit."""
    import os
    import subprocess
    import uuid

    from krex_runtime.node import native_build

    device = f"t{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "LD_LIBRARY_PATH": str(native_build.simulated_driver_dir()), "KREX_SIM_DEVICE": device,
           "KREX_SIM_GPUS": "2"}
    subprocess.run([PY, "-c", "from krex_runtime.sim.simcuda import SimCuda; SimCuda()"], env=env, check=True, timeout=60)
    rt = make_runtime(policy="krex", sim=3, canary=True, device=device)
    with rt.client() as c:
        wait_until(lambda: all(g["canary"].get("baseline_compute_ms") for g in c.call("snapshot")["state"]["gpus"]),
                   60, "a canary baseline on every GPU")
