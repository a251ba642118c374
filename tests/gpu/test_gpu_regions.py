"""The region invariant suite on a real GPU: PyTorch tenants, the real driver,
both gate backends. Where the simulator has an execution log, the GPU has the
interception counters: the other tenants' calls must not move while a region
is held. Skipped without a GPU (marker `gpu`).

    python -m pytest -m gpu tests/gpu/test_gpu_regions.py -s
"""

from __future__ import annotations

import os
import signal
import statistics
import sys

import pytest
from region_checks import (
    check_fifo,
    check_no_submissions_while_held,
    check_nothing_left,
    check_one_holder_per_gpu,
    regions_of,
)
from runtime_helpers import (
    NO_WATCHDOG,
    RECOVERY_BOUND_S,
    REPO,
    cgroup_root,
    command_pid,
    finish,
    frozen_cgroups,
    gpu_state,
    output,
    region_results,
    regions_config,
    stop_the_first,
    submit,
    tenant_processes,
    trace_events,
    wait_ready,
)

from krex_runtime.regions.freezer import is_stopped
from krex_runtime.testing.local_runtime import Runtime, wait_until

pytestmark = pytest.mark.gpu
PY = sys.executable
TENANTS = REPO / "tests" / "tenants"
BACKENDS = ["preload", "driver-lock"]


def gpu_runtime(make_runtime, backend: str = "preload", slots: int = 17, watchdog: bool = True, **settings: object) -> Runtime:
    return make_runtime(policy="krex", sim=0, slots=slots, extra_config=regions_config(backend, **settings),
                        runtime_extra="" if watchdog else NO_WATCHDOG)


def runtime_refusals(rt: Runtime) -> str:
    """The runtime log's warnings: why a region was refused, for a failure message."""
    log = rt.log_path
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join([line[:300] for line in lines if "WARNING" in line or "ERROR" in line][-12:])


def torch_busy(rt: Runtime, n: int = 4096, depth: int = 4) -> str:
    return submit(rt, PY, str(TENANTS / "torch_busy.py"), str(n), str(depth), gpu=0)


def torch_regions(rt: Runtime, *args: str) -> str:
    return submit(rt, PY, str(TENANTS / "torch_regions.py"), *args, gpu=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_stress_sixteen_tenants(make_runtime, backend: str) -> None:
    rt = gpu_runtime(make_runtime, backend, slots=16)
    ids = [
        torch_regions(rt, "--regions", "4", "--n", "2048", "--repeats", "3", "--pause-ms", "50", "--noise", str(i % 4))
        for i in range(16)
    ]
    for command_id in ids:
        done = rt.krex("wait", command_id, timeout=600)
        assert done.returncode == 0, done.stderr
        results = region_results(done.stdout)
        refused = [r for r in results if r.get("error")]
        assert len(results) == 4 and not refused, f"{command_id}: {refused or results}\n" + runtime_refusals(rt)
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    assert len(held) == 64
    check_one_holder_per_gpu(events)
    check_fifo(events)
    check_no_submissions_while_held(held)
    # The tenants start together: many entries find others inside context creation or
    # module loads, which entry lets finish outside (regions/entry/quiesce.py); the check above
    # holds for those regions too.
    granted = [e for e in events if e["type"] == "region_granted"]
    print(f"{backend}: {sum(1 for e in granted if e.get('deferred'))} of {len(granted)} regions let a tenant "
          f"finish a host-side call; quiesce max {max(e['quiesce_s'] for e in granted) * 1e3:.1f} ms")


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_fidelity_inside_a_region(make_runtime, backend: str) -> None:
    rt = gpu_runtime(make_runtime, backend)
    bench = ["--regions", "3", "--n", "12288", "--repeats", "5"]
    solo_out = rt.krex("run", "--gpu", "0", "--", PY, str(TENANTS / "torch_regions.py"), *bench, timeout=600)
    solo = statistics.median(t for r in region_results(solo_out.stdout) for t in r["times_ms"])
    others = [torch_busy(rt) for _ in range(15)]
    wait_ready(rt, *others)
    inside_out = rt.krex("run", "--gpu", "0", "--", PY, str(TENANTS / "torch_regions.py"), *bench, timeout=600)
    inside = statistics.median(t for r in region_results(inside_out.stdout) for t in r["times_ms"])
    finish(rt, *others)
    print(f"[{backend}] 12288^2 bf16 matmul: solo {solo:.3f} ms, inside a region with 15 busy tenants {inside:.3f} ms")
    # The H200 runs this matmul at 4.7-5.4 ms alone depending on its power
    # state (a sustained 12288^2 loop reaches the 700 W cap and clocks down;
    # seen on 2026-11-29: 4.77, 4.83, 4.97 and 5.38 ms "solo"), so the bound
    # here is the GPU's own variation, not KREX's: without protection the same
    # matmul takes 13-23 ms (docs/BENCHMARKS.md). Regions carry the SM clock
    # and throttle flags so a measurement can be judged by them.
    assert abs(inside / solo - 1) < 0.15


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_sigkill_of_the_holder(make_runtime, backend: str) -> None:
    rt = gpu_runtime(make_runtime, backend)
    others = [torch_busy(rt) for _ in range(3)]
    wait_ready(rt, *others)
    holder = torch_regions(rt, "--regions", "1", "--hold-s", "1000")
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None, 120, "the region to be granted")
    assert len(frozen_cgroups(cgroup_root(rt))) == 3
    os.kill(command_pid(rt, holder), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the region to be released")
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    finish(rt, *others)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_a_tenant_that_was_already_stopped(make_runtime, backend: str) -> None:
    rt = gpu_runtime(make_runtime, backend)
    others = [torch_busy(rt) for _ in range(2)]
    stopped = stop_the_first(rt, others)
    done = rt.krex("run", "--gpu", "0", "--", PY, str(TENANTS / "torch_regions.py"), "--regions", "2", timeout=600)
    assert done.returncode == 0, done.stderr
    assert all("times_ms" in r for r in region_results(done.stdout))
    assert frozen_cgroups(cgroup_root(rt)) == []
    assert is_stopped(stopped)  # we froze and thawed it; it stays as someone else left it
    os.kill(stopped, signal.SIGCONT)
    check_nothing_left(rt.run_dir)  # a stopped tenant counts as held back: only after SIGCONT
    finish(rt, *others)


def test_gpu_a_tenant_that_never_drains(make_runtime) -> None:
    rt = gpu_runtime(make_runtime, drain_timeout_s=1.0, quiesce_timeout_s=1.0)
    hog = torch_busy(rt, n=16384, depth=400)  # ~8 s of queued matmuls per batch
    wait_until(lambda: gpu_state(rt)["running"], 60, "the hog to start")
    wait_until(lambda: "ready" in output(rt, hog), 120, "the hog's first batch")
    # A request that lands in the last second of one of the hog's ~5 s batches
    # sees it drain in time and is rightly granted (about one in five). Three
    # regions at random moments: at least one must find more than a second of
    # queued work and time out; none may fail any other way.
    done = rt.krex("run", "--gpu", "0", "--", PY, str(TENANTS / "torch_regions.py"), "--regions", "3",
                   "--pause-ms", "1500", timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    errors = [r.get("error") for r in region_results(done.stdout)]
    assert "ETIMEDOUT" in errors and set(errors) <= {"ETIMEDOUT", None}, errors
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    finish(rt, hog)


def test_gpu_sigkill_of_the_runtime_then_restart(make_runtime) -> None:
    rt = gpu_runtime(make_runtime, watchdog=False)  # the restart's recovery, not the watchdog's
    others = [torch_busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    torch_regions(rt, "--regions", "1", "--hold-s", "1000")
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None, 120, "the region to be granted")
    root = cgroup_root(rt)
    rt.stop(signal.SIGKILL)
    assert len(frozen_cgroups(root)) == 2
    rt.start()
    assert frozen_cgroups(root) == []
    assert "reopened gpu0.gate" in trace_events(rt, "runtime_started")[-1]["recovered"]
    wait_until(lambda: tenant_processes(rt.run_dir) == [], RECOVERY_BOUND_S, "orphaned tenants to end")
    check_nothing_left(rt.run_dir)


def test_gpu_sigkill_of_a_waiting_tenant(make_runtime) -> None:
    rt = gpu_runtime(make_runtime)
    holder = torch_regions(rt, "--regions", "1", "--hold-s", "1000")
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None, 120, "the region to be granted")
    waiter = submit(rt, PY, "-c", "from krex_runtime.client import region\nwith region(): pass", gpu=0)
    wait_until(lambda: len(gpu_state(rt)["region_queue"]) == 1, 60, "the second request to queue")
    os.kill(command_pid(rt, waiter), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt)["region_queue"] == [], RECOVERY_BOUND_S, "the request to be withdrawn")
    finish(rt, holder)
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the holder's release")
    check_nothing_left(rt.run_dir)


def test_gpu_holder_over_the_hold_limit(make_runtime) -> None:
    rt = gpu_runtime(make_runtime, hold_limit_s=1.0)
    others = [torch_busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    holder = torch_regions(rt, "--regions", "1", "--hold-s", "4")
    assert rt.krex("wait", holder, timeout=300).returncode == 0
    assert "limit" in trace_events(rt, "region_released")[-1]["reason"]
    assert region_results(output(rt, holder))[0]["error"] == "ETIMEDOUT"
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    finish(rt, *others)
