"""What perturbed a region while it was held (regions/hold_watch.py), end to
end on a simulated GPU: a holder whose measuring thread shares its core with
a spinning process is `perturbed` with the wait's figure; a clock that dips
and comes back between the grant and the release (both read at the top
clock) is a flag with its lowest value; another tenant still inside a
context creation past the entry's bound (`regions.host_side_wait_s`) makes it
`perturbed` and is named; another tenant that ends inside the region is a
note; a region with none of these is `verified`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runtime_helpers import PY, TENANTS, HeldRegions, output, regions_config, submit, trace_events, wait_ready

from krex_runtime.testing.local_runtime import wait_until


def verified_but_for_this_machine(r: dict[str, Any]) -> bool:
    """Verified, or perturbed only by the measuring thread's wait: this shared
    test machine's other processes run on the holder's reserved core too."""
    return r["verdict"] == "verified" or (r["verdict"] == "perturbed" and r["reasons"][0].startswith("cpu:") and
                                          not any(x.startswith("tenants:") for x in r["reasons"][1:2]))


def trace_reasons(rt: Any, region: int) -> list[str]:
    """A region's reasons whole (the channel's VERDICT line cuts long ones)."""
    return next(e["verdict_reasons"] for e in trace_events(rt, "region_released") if e["region"] == region)


def exit_flags(rt: Any, region: int) -> list[str]:
    return next(e["exit_flags"] for e in trace_events(rt, "region_released") if e["region"] == region)


def test_a_hold_is_perturbed_by_a_busy_core_and_an_ending_tenant_and_flagged_by_a_clock_dip(
        make_runtime: Any, tmp_path: Path) -> None:
    clock = tmp_path / "sm_clock"
    # A shared, noisy test machine delays any thread's wake-ups a little: the
    # bound is set where only a core really shared (about half its time) passes it.
    settings = {"protection": "gpu-only", "perturbed_cpu_wait_share": 0.2, "perturbed_cpu_wait_min_ms": 1.0,
                "host_side_wait_s": 0.05}
    rt = make_runtime(policy="krex", sim=1, slots=16, extra_config=regions_config("preload", **settings),
                      runtime_env={"KREX_SIM_SM_CLOCK_FILE": str(clock)})
    holder = HeldRegions(rt, tmp_path / "control", "sleep", "spin", "sleep", "sleep", "sleep")

    # 0: nothing around it.
    holder.go(0)
    holder.granted(0)
    alone = holder.release(0)
    assert verified_but_for_this_machine(alone), alone
    assert any(r.startswith("cpu: measuring thread waited") for r in alone["reasons"]), alone

    # 1: a process spins on the measuring thread's own core while it is always runnable.
    holder.go(1)
    tid = holder.granted(1)["tid"]
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, os.sched_getaffinity(tid))
        time.sleep(0.5)  # no assertion on time: the spinner only needs to share the core a while
    finally:
        spinner.kill()
        spinner.wait()
    busy = holder.release(1)
    assert busy["verdict"] == "perturbed", busy
    assert busy["reasons"][0].startswith("cpu: measuring thread waited"), busy  # the spinner made it wait
    assert any(f.startswith("cpu:waited-") for f in exit_flags(rt, busy["region"]))

    # 2: the clock dips and is back at the top before the release.
    holder.go(2)
    holder.granted(2)
    now_us = time.time_ns() // 1000
    clock.write_text(f"{now_us} 1200\n{now_us + 1000} 1980\n")
    dipped = holder.release(2)
    assert verified_but_for_this_machine(dipped), dipped  # a clock is a note, never a perturbation by itself
    assert any("dipped to 1200 MHz" in r for r in trace_reasons(rt, dipped["region"]) if r.startswith("clock:")), dipped
    assert "clock-dip:1200MHz" in exit_flags(rt, dipped["region"])

    # 3: another tenant, a CUDA user, ends inside the region.
    done = tmp_path / "done"
    other = submit(rt, PY, str(TENANTS / "ends_on_signal.py"), str(done))
    wait_ready(rt, other)
    holder.go(3)
    holder.granted(3)
    done.touch()
    assert rt.krex("wait", other).returncode == 0
    ended = holder.release(3)
    assert verified_but_for_this_machine(ended), ended  # an end did not measurably slow trials on the H100: a note
    assert any(r.startswith("tenants: tenant ") and "ended" in r for r in trace_reasons(rt, ended["region"])), ended
    assert "tenants:1-ended,0-in-driver" in exit_flags(rt, ended["region"])

    # 4: another tenant is inside a context creation longer than the entry waits for it.
    creating = submit(rt, PY, str(TENANTS / "startup.py"), "--warm", "--ctx-ms", "3000")
    wait_until(lambda: "creating" in output(rt, creating), 60, "the tenant to enter its context creation")
    holder.go(4)
    holder.granted(4)
    in_driver = holder.release(4)
    assert in_driver["verdict"] == "perturbed", in_driver
    assert any(r.startswith("tenants: tenant ") and "creating a context" in r
               for r in trace_reasons(rt, in_driver["region"])), in_driver
    assert "tenants:0-ended,1-in-driver" in exit_flags(rt, in_driver["region"])
    assert rt.krex("wait", holder.id).returncode == 0
    rt.krex("wait", creating)
    assert [e["verdict"] for e in trace_events(rt, "region_released")][1::3] == ["perturbed", "perturbed"]
