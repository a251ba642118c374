"""What perturbed a region while it was held (regions/hold_watch.py), end to
end on a simulated GPU: a holder whose measuring thread shares its core with
a spinning process is `perturbed` with the wait's figure; a clock that dips
and comes back between the grant and the release (both read at the top
clock) is a flag with its lowest value; another tenant that ends inside the
region makes it `perturbed` and is named; a region with none of these is
`verified`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runtime_helpers import PY, TENANTS, output, regions_config, submit, trace_events, wait_ready

from krex_runtime.testing.local_runtime import wait_until


def results(rt: Any, command_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output(rt, command_id).splitlines() if line.startswith("{")]


def granted(rt: Any, command_id: str, i: int) -> dict[str, Any]:
    wait_until(lambda: any(r.get("granted") == i for r in results(rt, command_id)), 60, f"region {i} to be granted")
    return next(r for r in results(rt, command_id) if r.get("granted") == i)


def released(rt: Any, command_id: str, i: int) -> dict[str, Any]:
    wait_until(lambda: len([r for r in results(rt, command_id) if "verdict" in r]) > i, 60, f"region {i}'s verdict")
    return [r for r in results(rt, command_id) if "verdict" in r][i]


def exit_flags(rt: Any, region: int) -> list[str]:
    return next(e["exit_flags"] for e in trace_events(rt, "region_released") if e["region"] == region)


def test_a_hold_is_perturbed_by_a_busy_core_and_an_ending_tenant_and_flagged_by_a_clock_dip(
        make_runtime: Any, tmp_path: Path) -> None:
    clock = tmp_path / "sm_clock"
    # A shared, noisy test machine delays any thread's wake-ups a little: the
    # bound is set where only a core really shared (about half its time) passes it.
    settings = {"protection": "gpu-only", "perturbed_cpu_wait_share": 0.2, "perturbed_cpu_wait_min_ms": 1.0}
    rt = make_runtime(policy="krex", sim=1, slots=16, extra_config=regions_config("preload", **settings),
                      runtime_env={"KREX_SIM_SM_CLOCK_FILE": str(clock)})
    control = tmp_path / "control"
    control.mkdir()
    holder = submit(rt, PY, str(TENANTS / "held_activity.py"), str(control), "sleep", "spin", "sleep", "sleep")

    # 0: nothing around it.
    (control / "go0").touch()
    granted(rt, holder, 0)
    (control / "release0").touch()
    alone = released(rt, holder, 0)
    assert alone["verdict"] == "verified", alone
    assert any(r.startswith("cpu: measuring thread waited") for r in alone["reasons"]), alone

    # 1: a process spins on the measuring thread's own core while it is always runnable.
    (control / "go1").touch()
    tid = granted(rt, holder, 1)["tid"]
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, os.sched_getaffinity(tid))
        time.sleep(0.5)  # no assertion on time: the spinner only needs to share the core a while
    finally:
        spinner.kill()
        spinner.wait()
    (control / "release1").touch()
    busy = released(rt, holder, 1)
    assert busy["verdict"] == "perturbed", busy
    assert busy["reasons"][0].startswith("cpu: measuring thread waited"), busy
    assert any(f.startswith("cpu:waited-") for f in exit_flags(rt, busy["region"]))

    # 2: the clock dips and is back at the top before the release.
    (control / "go2").touch()
    granted(rt, holder, 2)
    now_us = time.time_ns() // 1000
    clock.write_text(f"{now_us} 1200\n{now_us + 1000} 1980\n")
    (control / "release2").touch()
    dipped = released(rt, holder, 2)
    assert dipped["verdict"] == "verified", dipped  # a clock is a note, never a perturbation by itself
    assert any("dipped to 1200 MHz" in r for r in dipped["reasons"] if r.startswith("clock:")), dipped
    assert "clock-dip:1200MHz" in exit_flags(rt, dipped["region"])

    # 3: another tenant, a CUDA user, ends inside the region.
    done = tmp_path / "done"
    other = submit(rt, PY, str(TENANTS / "ends_on_signal.py"), str(done))
    wait_ready(rt, other)
    (control / "go3").touch()
    granted(rt, holder, 3)
    done.touch()
    assert rt.krex("wait", other).returncode == 0
    (control / "release3").touch()
    ended = released(rt, holder, 3)
    assert ended["verdict"] == "perturbed", ended
    assert any(r.startswith("tenants: tenant ") and "ended" in r for r in ended["reasons"]), ended
    assert any(f.startswith("tenants:1-ended") for f in exit_flags(rt, ended["region"]))
    assert rt.krex("wait", holder).returncode == 0
    assert [e["verdict"] for e in trace_events(rt, "region_released")] == ["verified", "perturbed", "verified", "perturbed"]
