"""Region entry and other tenants inside host-side calls (context creation,
module loading), per gate backend: real runtime, real tenants with the
interception library preloaded on the simulated driver, whose context
creation and module loading are made slow (KREX_SIM_CTX_CREATE_MS,
KREX_SIM_MODULE_LOAD_MS).

Before the gate closes, entry parks new host-side calls and lets those in
progress finish, for at most `regions.host_side_wait_s`, while everyone's GPU
work goes on (region_entry.py). Past that bound (0 in the tests of it), the
bound stated by entry/quiesce.py: entry waits for perturbing calls in progress at
the close, never for a host-side call. Checked by order, not by timing: the
region is granted, held and released while the slow tenants are still inside
their calls (their own CLOCK_MONOTONIC stamps), and their work after the call
runs outside every region (the simulator's execution log).
"""

from __future__ import annotations

import pytest
from region_checks import check_exclusive, check_no_submissions_while_held, check_nothing_left, regions_of
from runtime_helpers import (
    PY,
    TENANTS,
    HeldRegions,
    cgroup_root,
    command_pid,
    finish,
    frozen_cgroups,
    gpu_state,
    krex_runtime,
    output,
    region_results,
    snapshot,
    submit,
    trace_events,
)

from krex_runtime.sim.execution_log import read_execution_log
from krex_runtime.testing.local_runtime import wait_until

SLOW_MS = 4000  # the host-side call; the region is granted and released well inside it


def _stamp(text: str, what: str) -> int | None:
    for line in text.splitlines():
        if line.startswith(what + " "):
            return int(line.split()[1])
    return None


@pytest.mark.parametrize("backend", ["preload", "driver-lock"])
def test_entry_lets_context_creation_and_module_loads_finish_outside(make_runtime, backend: str) -> None:
    rt = krex_runtime(make_runtime, backend, host_side_wait_s=0)
    # One tenant with work behind it, inside a second context's creation; one
    # inside a module load right after creating its primary context.
    creating = submit(rt, PY, str(TENANTS / "startup.py"), "--warm", "--ctx-ms", str(SLOW_MS))
    loading = submit(rt, PY, str(TENANTS / "startup.py"), "--module-ms", str(SLOW_MS))
    wait_until(lambda: "creating" in output(rt, creating) and "loading" in output(rt, loading), 60,
               "the tenants to enter their slow calls")
    done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200")
    assert done.returncode == 0, done.stderr
    assert "times_ms" in region_results(done.stdout)[0]
    granted = trace_events(rt, "region_granted")[-1]
    released_ns = trace_events(rt, "region_released")[-1]["released_mono_ns"]
    pids = {command_pid(rt, creating): "context", command_pid(rt, loading): "module"}
    # Inside their calls at the close, not waited for, let run (neither locked nor frozen).
    assert granted["inside_at_close"].get("context") == 1 and granted["inside_at_close"].get("module") == 1, granted
    assert not {"context", "module"} & set(granted["waited_for"]), granted
    assert {pid: next(iter(granted["deferred"].get(str(pid), {"": 0}))) for pid in pids} == pids, granted
    assert granted["drain"].get(str(command_pid(rt, creating))) == "ok", granted  # its first context was drained
    assert len(granted["frozen"]) == 0, granted
    # The region was over before either call returned (stamps on the same clock).
    wait_until(lambda: "done" in output(rt, creating) and "done" in output(rt, loading), 60, "the tenants to finish")
    assert _stamp(output(rt, creating), "created") > released_ns
    assert _stamp(output(rt, loading), "loaded") > released_ns
    check_nothing_left(rt.run_dir)
    finish(rt, creating, loading)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_no_submissions_while_held(held)
    check_exclusive(events, held, rt.root / "sim.log")


@pytest.mark.parametrize("backend", ["preload", "driver-lock"])
def test_entry_does_not_wait_for_a_launch_that_loads_its_function(make_runtime, backend: str) -> None:
    # CUDA's lazy loading: a function's first launch loads its code. The library
    # loads it before the launch, as a module-class call entry lets finish.
    rt = krex_runtime(make_runtime, backend, host_side_wait_s=0)
    lazy = submit(rt, PY, str(TENANTS / "startup.py"), "--lazy-ms", str(SLOW_MS))
    wait_until(lambda: "launching" in output(rt, lazy), 60, "the tenant to start its first launch")
    done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200")
    assert done.returncode == 0, done.stderr
    granted = trace_events(rt, "region_granted")[-1]
    released_ns = trace_events(rt, "region_released")[-1]["released_mono_ns"]
    assert granted["inside_at_close"] == {"module": 1} and granted["waited_for"] == {}, granted
    wait_until(lambda: "done" in output(rt, lazy), 60, "the tenant to finish")
    assert _stamp(output(rt, lazy), "launched") > released_ns  # over before its load returned
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_no_submissions_while_held(held)
    check_exclusive(events, held, rt.root / "sim.log")


def test_a_tenant_let_run_is_frozen_once_its_call_returns(make_runtime, tmp_path) -> None:
    rt = krex_runtime(make_runtime, host_side_wait_s=0)
    holder = HeldRegions(rt, tmp_path / "control", "sleep")
    loading = submit(rt, PY, str(TENANTS / "startup.py"), "--module-ms", str(SLOW_MS))
    wait_until(lambda: "loading" in output(rt, loading), 60, "the tenant to enter its module load")
    holder.go(0)
    holder.granted(0)
    granted = trace_events(rt, "region_granted")[-1]
    assert str(command_pid(rt, loading)) in granted["deferred"] and granted["frozen"] == [], granted
    # Its load returns during the hold; then it is frozen, until the release.
    wait_until(lambda: f"cmd-{loading}" in frozen_cgroups(cgroup_root(rt)), 30, "the tenant to be frozen late")
    assert "loaded" in output(rt, loading) and gpu_state(rt)["region_holder"] is not None
    holder.release(0)
    assert rt.krex("wait", holder.id).returncode == 0
    released = trace_events(rt, "region_released")[-1]
    tenant = next(e["tenant_id"] for e in trace_events(rt, "command_started") if e["id"] == loading)
    assert released["late_frozen"] == [tenant], released
    wait_until(lambda: "done" in output(rt, loading), 60, "the tenant to finish after the region")
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_exclusive(events, held, rt.root / "sim.log")


def region_over_a_context_creation(rt, tmp_path) -> tuple[str, dict]:
    """A tenant enters a slow context creation; then a region is taken and
    released. Returns the tenant's command id and the region's grant event."""
    holder = HeldRegions(rt, tmp_path / "control", "sleep")
    creating = submit(rt, PY, str(TENANTS / "startup.py"), "--warm", "--ctx-ms", str(SLOW_MS))
    wait_until(lambda: "creating" in output(rt, creating), 60, "the tenant to enter its context creation")
    holder.go(0)
    holder.granted(0)
    holder.release(0)
    return creating, trace_events(rt, "region_granted")[-1]


@pytest.mark.parametrize("backend", ["preload", "driver-lock"])
def test_entry_lets_a_context_creation_in_progress_finish_first_while_gpu_work_goes_on(
        make_runtime, backend, tmp_path) -> None:
    rt = krex_runtime(make_runtime, backend, protection="gpu-only", host_side_wait_s=30)
    busy = submit(rt, PY, str(TENANTS / "busy.py"), "2000", "4")
    wait_until(lambda: "ready" in output(rt, busy), 60, "the busy tenant")
    creating, granted = region_over_a_context_creation(rt, tmp_path)
    # The gate saw the creation return before it closed: nobody inside a host-side call in the region.
    assert granted["host_side_s"] > 0 and granted["host_side_left"] == 0, granted
    assert granted["deferred"] == {} and granted["inside_at_close"] == {}, granted
    closed_ns = granted["granted_mono_ns"] - int((granted["enter_s"] - granted["host_side_s"]) * 1e9)
    wait_until(lambda: "created" in output(rt, creating), 60, "the creation to return")
    assert _stamp(output(rt, creating), "creating") < closed_ns - int(granted["host_side_s"] * 1e9)
    # Meanwhile the busy tenant's kernels went on running: the wait stopped nobody's GPU work.
    busy_pid = command_pid(rt, busy)
    waited_from = closed_ns - int(granted["host_side_s"] * 1e9)
    assert any(r.pid == busy_pid and waited_from <= r.start_ns < closed_ns
               for r in read_execution_log(rt.root / "sim.log")), "no busy kernel while entry waited"
    rt.krex("cancel", busy)
    finish(rt, creating)
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_exclusive(events, held, rt.root / "sim.log")


def test_entry_waits_for_every_call_when_told(make_runtime, tmp_path) -> None:
    rt = krex_runtime(make_runtime, entry_waits_for="all", host_side_wait_s=0)
    creating, granted = region_over_a_context_creation(rt, tmp_path)
    assert granted["waited_for"] == {"context": 1} and granted["deferred"] == {}, granted
    assert len(granted["frozen"]) == 1  # out of its call by then, so frozen at entry
    # Granted only once the call had returned.
    wait_until(lambda: "done" in output(rt, creating), 60, "the tenant to finish")
    assert _stamp(output(rt, creating), "created") < granted["granted_mono_ns"]
    check_nothing_left(rt.run_dir)


def _commands_running(rt, ids: list[str]) -> list[str]:
    states = {c["id"]: c["state"] for c in snapshot(rt)["commands"]}
    return [i for i in ids if states.get(i) == "running"]


@pytest.mark.parametrize("backend, protection", [("preload", "gpu-only"), ("driver-lock", "gpu+cpu")])
def test_work_outside_regions_goes_on_while_regions_queue_back_to_back(make_runtime, backend, protection) -> None:
    # Three tenants keep the queue full: at every release another request waits.
    rt = krex_runtime(make_runtime, backend, protection=protection)
    loopers = [submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "2000", "--kernel-us", "2000", "--repeats", "10")
               for _ in range(3)]
    wait_until(lambda: all(region_results(output(rt, i)) for i in loopers), 60, "every looper to hold a region")
    outside = submit(rt, PY, str(TENANTS / "outside.py"), "--rounds", "20")
    # Its launches park while a region is held; the gap after each release lets them through.
    wait_until(lambda: "done" in output(rt, outside) or not _commands_running(rt, loopers), 300,
               "the tenant outside regions to finish, or the loopers")
    assert "done" in output(rt, outside) and _commands_running(rt, loopers) == loopers, (
        "the tenant outside regions finished only once the regions stopped"
    )
    finish(rt, *loopers)
    # Releases that held its rounds back, and entries that left the gate open for them first.
    assert any(e["held_back"] > 0 for e in trace_events(rt, "region_released"))
    assert any(e["gap_s"] > 0 for e in trace_events(rt, "region_granted"))
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_no_submissions_while_held(held)
    check_exclusive(events, held, rt.root / "sim.log")
