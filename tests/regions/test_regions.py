"""Regions end to end: a real runtime under policy krex, real tenants with the
interception library preloaded on the simulated driver, real cgroups.

Fault tests state their bound: everything is thawed and reopened within
RECOVERY_BOUND_S of the fault (the heartbeat bound used here is 1 s).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from region_checks import (
    check_exclusive,
    check_held_alone,
    check_no_submissions_while_held,
    check_nothing_left,
    check_regions_ran,
    is_frozen,
    regions_of,
)
from runtime_helpers import (
    GATES,
    PY,
    RECOVERY_BOUND_S,
    TENANTS,
    VENDORS,
    busy,
    cgroup_root,
    check_hold_limit_outcome,
    check_vendor,
    command_pid,
    finish,
    frozen_cgroups,
    gpu_state,
    krex_runtime,
    region_results,
    regions_config,
    snapshot,
    stop_the_first,
    submit,
    tenant_processes,
    trace_events,
    wait_ready,
)

from krex_runtime.node import native_build
from krex_runtime.regions.freezer import is_stopped
from krex_runtime.regions.gate.core import Gate
from krex_runtime.sim.device_file import active_count, remove_device
from krex_runtime.sim.execution_log import read_execution_log
from krex_runtime.testing.local_runtime import Runtime, wait_until

# --- basics -------------------------------------------------------------------


def test_region_is_a_noop_without_the_runtime(tmp_path: Path, native_built: Path) -> None:
    device = f"noop{os.getpid()}"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"
    } | {"LD_LIBRARY_PATH": str(native_build.simulated_driver_dir()), "KREX_SIM_DEVICE": device}
    try:
        done = subprocess.run(
            [PY, str(TENANTS / "regions.py"), "--regions", "2", "--kernel-us", "200"],
            env=env, capture_output=True, text=True, timeout=60,
        )
    finally:
        remove_device(device)
    assert done.returncode == 0, done.stderr
    assert [r["region"] for r in region_results(done.stdout)] == [0, 1]


def test_region_decorator_and_c_api_under_the_runtime(make_runtime, native_built: Path) -> None:
    rt = krex_runtime(make_runtime)
    script = (
        "from krex_runtime.client import region\n"
        "@region()\n"
        "def measure():\n"
        "    return 42\n"
        "print(measure(), measure())\n"
    )
    done = rt.krex("run", "--", PY, "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42 42"
    tool = native_build.native_dir() / "tests" / "region_client"
    done = rt.krex("run", "--", str(tool), "enter", "exit", "exit", "enter", "exit")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:5] == ["enter 0", "exit 0", f"exit {-22}", "enter 0", "exit 0"]
    rt.stop()
    assert len(trace_events(rt, "region_granted")) == 4


# --- the invariant suite ----------------------------------------------------------


@pytest.mark.parametrize("backend, vendor", GATES)
def test_stress_sixteen_tenants_per_gpu(make_runtime, backend: str, vendor: str) -> None:
    rt = krex_runtime(make_runtime, backend, sim=2, slots=16, vendor=vendor)
    ids = []
    for i in range(32):
        ids.append(
            submit(
                rt, PY, str(TENANTS / "regions.py"), "--regions", "4", "--kernel-us", "300", "--repeats", "3",
                "--pause-ms", "30", "--noise", str(i % 4), "--noise-us", "400", gpu=i % 2,
            )
        )
    check_regions_ran(rt, ids, 4)
    # Every region's exclusivity certificate agrees too (regions/certificate.py).
    _, held, records = check_held_alone(rt)
    assert len(held) == 128 and records > 128 * 3


# --- faults -------------------------------------------------------------------------


def _holding(rt: Runtime, hold_s: float = 1000) -> str:
    holder = submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200", "--hold-s", str(hold_s))
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None, 60, "the region to be granted")
    return holder


@pytest.mark.parametrize("backend, vendor", GATES)
def test_sigkill_of_the_holder(make_runtime, backend: str, vendor: str) -> None:
    rt = krex_runtime(make_runtime, backend, vendor=vendor)
    others = [busy(rt) for _ in range(3)]
    wait_ready(rt, *others)
    holder = _holding(rt)
    check_vendor(rt, vendor, holder, *others)
    root = cgroup_root(rt)
    assert len(frozen_cgroups(root)) == 3
    os.kill(command_pid(rt, holder), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the region to be released")
    assert trace_events(rt, "region_released")[-1]["reason"] == "tenant disconnected"
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(root) == []
    finish(rt, *others)


@pytest.mark.parametrize("vendor", VENDORS)
def test_sigkill_of_a_waiting_tenant(make_runtime, vendor: str) -> None:
    rt = krex_runtime(make_runtime, vendor=vendor)
    holder = _holding(rt)
    check_vendor(rt, vendor, holder)
    # No GPU work before the request: a tenant's kernels would park at the closed gate.
    waiter = submit(rt, PY, "-c", "from krex_runtime.client import region\nwith region(): pass")
    wait_until(lambda: len(gpu_state(rt)["region_queue"]) == 1, 60, "the second request to queue")
    os.kill(command_pid(rt, waiter), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt)["region_queue"] == [], RECOVERY_BOUND_S, "the request to be withdrawn")
    assert trace_events(rt, "region_withdrawn")[-1]["reason"] == "tenant disconnected while waiting"
    finish(rt, holder)
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the holder's release")
    check_nothing_left(rt.run_dir)


@pytest.mark.parametrize("vendor", VENDORS)
def test_sigkill_of_the_runtime_then_restart(make_runtime, vendor: str) -> None:
    rt = krex_runtime(make_runtime, watchdog=False, vendor=vendor)  # the restart's recovery, not the watchdog's
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    check_vendor(rt, vendor, *others, _holding(rt))
    root = cgroup_root(rt)
    assert len(frozen_cgroups(root)) == 2
    rt.stop(signal.SIGKILL)
    assert len(frozen_cgroups(root)) == 2  # the freeze outlives the runtime...
    rt.start()  # ...until the next start thaws and reopens what it finds
    started = trace_events(rt, "runtime_started")[-1]
    assert "reopened gpu0.gate" in started["recovered"]
    assert sum(1 for line in started["recovered"] if line.startswith("thawed")) == 3
    assert frozen_cgroups(root) == []
    wait_until(lambda: tenant_processes(rt.run_dir) == [], RECOVERY_BOUND_S, "the orphaned tenants to end")
    check_nothing_left(rt.run_dir)
    assert rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "1").returncode == 0


@pytest.mark.parametrize("vendor", VENDORS)
def test_gate_fails_open_when_the_runtime_dies(make_runtime, vendor: str) -> None:
    # gpu-only protection: nothing frozen, so the gated tenants show the fail-open path.
    rt = krex_runtime(make_runtime, protection="gpu-only", watchdog=False, vendor=vendor)
    others = [busy(rt, threads=2) for _ in range(2)]
    wait_ready(rt, *others)
    pids = [command_pid(rt, c) for c in others]
    check_vendor(rt, vendor, *others, _holding(rt))
    gate = Gate.attach(rt.run_dir / "gates" / "gpu0.gate")
    wait_until(lambda: gate.parked() > 0, 30, "the other tenants to park")
    rt.stop(signal.SIGKILL)
    killed_ns = time.monotonic_ns()
    wait_until(lambda: gate.parked() == 0, RECOVERY_BOUND_S, "parked threads to fail open")
    gate.detach()
    log = rt.root / "sim.log"
    wait_until(
        lambda: any(r.pid in pids and r.start_ns > killed_ns for r in read_execution_log(log)),
        RECOVERY_BOUND_S,
        "the tenants' work to run again",
    )
    orphans = tenant_processes(rt.run_dir)  # of the killed runtime
    for proc in orphans:
        proc.kill()
    psutil.wait_procs(orphans, timeout=10)


# Killing the holder is the runtime's, whatever the vendor: AMD's runs the revoke.
@pytest.mark.parametrize("action, vendor", [("revoke", "nvidia"), ("kill", "nvidia"), ("revoke", "amd")])
def test_holder_over_the_hold_limit(make_runtime, action: str, vendor: str) -> None:
    rt = krex_runtime(make_runtime, hold_limit_s=1.0, on_hold_limit=action, vendor=vendor)
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    holder = submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--hold-s", "4")
    check_vendor(rt, vendor, *others)
    done = rt.krex("wait", "--json", holder)
    released = trace_events(rt, "region_released")[-1]
    assert "limit" in released["reason"]
    check_hold_limit_outcome(rt, done, holder, action, others)


def _active(device: str) -> int:
    try:
        return active_count(device)
    except (FileNotFoundError, ValueError):  # the first tenant has not created (or finished) the device yet
        return 0


@pytest.mark.parametrize("backend, vendor", GATES)
def test_a_tenant_that_never_drains(make_runtime, backend: str, vendor: str) -> None:
    rt = krex_runtime(make_runtime, backend, drain_timeout_s=1.0, vendor=vendor)
    hog = busy(rt, kernel_us=600e6, depth=1)  # one 10-minute kernel
    wait_until(lambda: _active(rt.device) >= 1, 30, "the hog's kernel to run")
    check_vendor(rt, vendor, hog)
    done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "1")
    assert done.returncode == 0, done.stderr
    assert region_results(done.stdout)[0]["error"] == "ETIMEDOUT"
    withdrawn = trace_events(rt, "region_withdrawn")[-1]
    assert "did not drain" in withdrawn["reason"]
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    finish(rt, hog)



@pytest.mark.parametrize("backend, vendor", GATES)
def test_a_tenant_that_was_already_stopped(make_runtime, backend: str, vendor: str) -> None:
    rt = krex_runtime(make_runtime, backend, vendor=vendor)
    others = [busy(rt) for _ in range(2)]
    stopped = stop_the_first(rt, others)
    check_vendor(rt, vendor, *others)
    done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "2")
    assert done.returncode == 0, done.stderr
    assert all("times_ms" in r for r in region_results(done.stdout))
    granted = trace_events(rt, "region_granted")[-1]
    assert granted["drain"].get(str(stopped)) in ("stopped", None)
    assert frozen_cgroups(cgroup_root(rt)) == []
    assert is_stopped(stopped)  # we froze and thawed it; it stays as someone else left it
    os.kill(stopped, signal.SIGCONT)
    check_nothing_left(rt.run_dir)
    finish(rt, *others)


def test_a_lock_the_driver_refuses_is_drained_by_the_library(make_runtime) -> None:
    """driver-lock: the driver refuses the checkpoint lock with an OS error (as
    the H200's does now and then for a process busy in the driver); the
    library's drain thread drains that tenant instead, and the region is granted."""
    rt = make_runtime(policy="krex", sim=1, slots=8, extra_config=regions_config("driver-lock"),
                      runtime_env={"KREX_SIM_LOCK_FAILS": "304"})
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "2")
    assert done.returncode == 0, done.stderr
    assert all("times_ms" in r for r in region_results(done.stdout)), done.stdout
    granted = trace_events(rt, "region_granted")[-1]
    assert {granted["drain"].get(str(command_pid(rt, c))) for c in others} == {"ok"}, granted["drain"]
    finish(rt, *others)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_no_submissions_while_held(held)
    assert check_exclusive(events, held, rt.root / "sim.log") > 0
    assert {e["verdict"] for e in events if e["type"] == "region_released"} == {"verified"}


def _tree_frozen(rt: Runtime, freezer: str, command_id: str) -> bool:
    pid = command_pid(rt, command_id)
    if freezer == "sigstop":
        return is_stopped(pid)
    return is_frozen(cgroup_root(rt) / f"cmd-{command_id}")


@pytest.mark.parametrize("cgroups, freezer", [("v2", "cgroup-v2"), ("v1", "cgroup-v1"), ("off", "sigstop")])
def test_each_freezer_holds_and_releases_the_others(make_runtime, cgroups: str, freezer: str) -> None:
    rt = make_runtime(policy="krex", sim=1, slots=8, cgroups=cgroups, extra_config=regions_config())
    with rt.client() as c:
        assert c.call("status")["regions"]["freezer"] == freezer
    others = [busy(rt) for _ in range(3)]
    wait_ready(rt, *others)
    holder = _holding(rt)
    assert all(_tree_frozen(rt, freezer, o) for o in others)
    os.kill(command_pid(rt, holder), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the region to be released")
    assert not any(_tree_frozen(rt, freezer, o) for o in others)
    check_nothing_left(rt.run_dir)
    done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "3", "--noise", "2")
    assert done.returncode == 0, done.stderr
    finish(rt, *others)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_no_submissions_while_held(held)
    check_exclusive(events, held, rt.root / "sim.log")


# --- fidelity ---------------------------------------------------------------------------


def _median_ms(text: str) -> float:
    return statistics.median(t for r in region_results(text) for t in r["times_ms"])


@pytest.mark.serial
def test_fidelity_inside_a_region_and_inflation_without(make_runtime) -> None:
    kernel = ["--regions", "2", "--kernel-us", "20000", "--repeats", "5"]
    # Eight busy tenants: enough for ungated to be several times slower, few enough to start quickly.
    protected = krex_runtime(make_runtime, slots=9)
    solo = _median_ms(protected.krex("run", "--", PY, str(TENANTS / "regions.py"), *kernel).stdout)
    tenants = [busy(protected, kernel_us=2000) for _ in range(8)]
    wait_ready(protected, *tenants)
    inside = _median_ms(protected.krex("run", "--", PY, str(TENANTS / "regions.py"), *kernel).stdout)
    finish(protected, *tenants)
    protected.stop()

    shared = make_runtime("ungated", policy="ungated", sim=1, slots=9)
    tenants = [busy(shared, kernel_us=2000) for _ in range(8)]
    wait_ready(shared, *tenants)
    unprotected = _median_ms(shared.krex("run", "--", PY, str(TENANTS / "regions.py"), *kernel).stdout)
    finish(shared, *tenants)
    print(f"solo {solo:.3f} ms, inside a region {inside:.3f} ms, ungated {unprotected:.3f} ms")
    assert abs(inside / solo - 1) < 0.02
    assert unprotected / solo > 2.0


# --- leases ---------------------------------------------------------------------------


def test_operator_lease_and_release(make_runtime) -> None:
    rt = krex_runtime(make_runtime)
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    leased = rt.krex("lease", "0", "--ttl", "60")
    assert leased.returncode == 0, leased.stderr
    state = gpu_state(rt)
    assert state["region_holder"] == 0 and state["region_kind"] == "lease"
    assert len(frozen_cgroups(cgroup_root(rt))) == 2
    queued = submit(rt, "true", gpu=0)
    assert snapshot(rt)["queue"] == [queued]
    assert rt.krex("lease", "0").returncode == 125  # already leased
    assert rt.krex("release", "0").returncode == 0
    assert rt.krex("wait", queued).returncode == 0
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the lease to end")
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    finish(rt, *others)


def test_lease_ttl_expires(make_runtime) -> None:
    rt = krex_runtime(make_runtime)
    assert rt.krex("lease", "0", "--ttl", "1").returncode == 0
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the lease to expire")
    assert trace_events(rt, "region_released")[-1]["reason"] == "lease expired"
    assert rt.krex("run", "--gpu", "0", "--", "true").returncode == 0
    check_nothing_left(rt.run_dir)


def test_command_with_a_lease(make_runtime) -> None:
    rt = krex_runtime(make_runtime)
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    done = rt.krex("run", "--lease", "--json", "--", PY, str(TENANTS / "regions.py"), "--regions", "1")
    assert done.returncode == 0, done.stderr
    granted = [e for e in trace_events(rt, "region_granted") if e["kind"] == "lease"]
    assert len(granted) == 1 and len(granted[0]["frozen"]) == 2
    # A region inside the lease is granted at once, and its verdict is told at once at its release.
    code = ("from krex_runtime.client import region\nwith region() as r:\n    pass\n"
            "print(r.verdict)\nprint(r.verdict_reasons[0])\n")
    done = rt.krex("run", "--lease", "--", PY, "-c", code)
    assert done.returncode == 0, done.stderr
    verdict, first_reason = done.stdout.splitlines()
    assert verdict == "verified" and first_reason.startswith("lease: inside lease "), done.stdout
    check_nothing_left(rt.run_dir)
    finish(rt, *others)


def test_lease_needs_policy_krex(make_runtime) -> None:
    rt = make_runtime(policy="ungated")
    done = rt.krex("lease", "0")
    assert done.returncode == 125 and "policy 'krex'" in done.stderr


@pytest.mark.parametrize("protection", ["gpu+cpu", "gpu-only"])
def test_tenants_never_run_on_reserved_cores_and_the_holder_only_while_it_holds(make_runtime, protection) -> None:
    # gpu-only skips the freeze, not the pin: the others' compiles go on, off the measuring thread's cores.
    rt = krex_runtime(make_runtime, protection=protection)
    with rt.client() as c:
        described = c.call("status")["regions"]
    reserved, tenant = described["reserved_cores"]["0"], described["tenant_cores"]["0"]
    if not reserved:
        pytest.skip(described["cpu_note"])
    script = (
        "import os\n"
        "from krex_runtime.client import region\n"
        "print(sorted(os.sched_getaffinity(0)))\n"
        "with region():\n"
        "    print(sorted(os.sched_getaffinity(0)))\n"
        "print(sorted(os.sched_getaffinity(0)))\n"
    )
    done = rt.krex("run", "--", PY, "-c", script)
    assert done.returncode == 0, done.stderr
    before, inside, after = (json.loads(line) for line in done.stdout.splitlines())
    assert before == tenant and after == tenant and inside == reserved
    assert not set(tenant) & set(reserved)
