"""The exclusivity certificate of a region (regions/certificate.py), end to
end on a simulated GPU: `verified` with nobody else on the GPU; `violated`
when a process the runtime did not start runs work on the same simulated GPU
during the region, and when a tenant of the runtime with its gate disabled
does (protection gpu-only, so it is not frozen). The simulator's execution
log is the witness that the interference really ran inside the region."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from region_checks import regions_of
from runtime_helpers import PY, REPO, TENANTS, krex_runtime, output, submit, trace_events, wait_ready

from krex_runtime.sim import layout as sim_layout
from krex_runtime.sim.execution_log import read_execution_log
from krex_runtime.testing.local_runtime import wait_until


def status(rt: Any) -> dict[str, Any]:
    with rt.client() as c:
        return c.call("status")


def lines(rt: Any, command_id: str) -> list[str]:
    return output(rt, command_id).splitlines()


def overlapped(rt: Any, region: int, pid: int) -> bool:
    """The execution log shows work of `pid` inside region number `region`."""
    held = next(h for h in regions_of(rt.trace_path)[1] if h.region == region)
    return any(r.pid == pid and r.start_ns < held.released_ns and r.end_ns > held.granted_ns
               for r in read_execution_log(rt.root / "sim.log"))


def test_verified_alone_violated_by_a_foreign_process_and_by_an_ungated_tenant(make_runtime: Any, tmp_path: Path) -> None:
    rt = krex_runtime(make_runtime, protection="gpu-only")
    go = tmp_path / "go"
    holder = submit(rt, PY, str(TENANTS / "certified.py"), str(go), "3")
    wait_until(lambda: "waiting" in lines(rt, holder), 60, "the first region to end")
    first = json.loads(lines(rt, holder)[0])
    assert first["verdict"] == "verified", first
    assert any(r.startswith("gate: no other") for r in first["reasons"]), first
    assert [r.split(":")[0] for r in first["reasons"]] == ["gate", "processes", "clock", "cpu"], first

    # A process the runtime did not start, on the same simulated GPU, with no gate.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}
    env |= {sim_layout.ENV_DEVICE: rt.device, sim_layout.ENV_GPUS: "1", sim_layout.ENV_LOG: str(rt.root / "sim.log"),
            "LD_LIBRARY_PATH": str(REPO / "native" / "build" / "sim")}
    foreign = subprocess.Popen([sys.executable, str(TENANTS / "busy.py"), "300", "2"], env=env,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert foreign.stdout is not None and foreign.stdout.readline().strip() == "ready"
        # Status (and the console, from the same telemetry) names it.
        wait_until(lambda: foreign.pid in (status(rt)["gpus"][0]["foreign_processes"] or []), 30, "status to name it")
        assert f"foreign GPU processes (not started by this runtime): GPU 0: pid {foreign.pid}" in rt.krex("status").stdout
        go.touch()
        wait_until(lambda: len(lines(rt, holder)) >= 4, 60, f"the second region: {lines(rt, holder)}")
        second = json.loads(lines(rt, holder)[2])
    finally:
        foreign.kill()
        foreign.wait()
    assert second["verdict"] == "violated", second
    assert f"processes: pid {foreign.pid} uses the GPU" in second["reasons"][0], second
    assert overlapped(rt, second["region"], foreign.pid)

    # A tenant of this runtime whose interception library has no gate.
    ungated = submit(rt, "env", "-u", "KREX_GATE_PATH", PY, str(TENANTS / "busy.py"), "300", "2")
    wait_ready(rt, ungated)
    go.touch()
    done = rt.krex("wait", holder)
    assert done.returncode == 0, done.stderr
    third = json.loads(lines(rt, holder)[-1])
    rt.krex("cancel", ungated)
    assert third["verdict"] == "violated", third
    assert "the gate did not hold" in third["reasons"][0], third
    ungated_pid = next(e["pid"] for e in trace_events(rt, "command_started") if e["id"] == ungated)
    assert overlapped(rt, third["region"], ungated_pid)
    assert [e["verdict"] for e in trace_events(rt, "region_released")] == ["verified", "violated", "violated"]
    assert status(rt)["gpus"][0]["verdicts"] == {"verified": 1, "violated": 2}
    # The holder's result lists its regions with their certificates.
    regions = json.loads(rt.krex("wait", "--json", holder).stdout)["regions"]
    assert [r["verdict"] for r in regions] == ["verified", "violated", "violated"]
    assert regions[1]["verdict_reasons"][0] == second["reasons"][0]


def test_a_runtime_started_under_a_power_cap_certifies_later_regions_at_the_top_clock(make_runtime, tmp_path: Path) -> None:
    """The runtime starts while busy tenants hold the GPU at a power-capped
    clock (its canary's baseline is taken there); later regions run at the
    GPU's top clock. A clock above a sample taken under load is no evidence
    of anyone: every region is verified, with no clock flag; one granted
    below the top clock is still verified, its measurement flagged."""
    capped, top = 1395, 1980
    clock_file = tmp_path / "sm_clock"
    clock_file.write_text(str(capped))
    rt = make_runtime(policy="krex", sim=1, slots=16, canary=True, canary_period_s=0.5,
                      runtime_env={"KREX_SIM_SM_CLOCK_FILE": str(clock_file)})
    for _ in range(3):
        wait_ready(rt, submit(rt, PY, str(TENANTS / "busy.py"), "2000", "4"))

    def baseline() -> float | None:
        with rt.client() as c:
            return c.call("snapshot")["state"]["gpus"][0]["canary"].get("baseline_sm_clock_mhz")

    wait_until(lambda: baseline() == capped, 120, "the canary's baseline under the power cap")
    clock_file.write_text(str(top))
    go = tmp_path / "go"
    holder = submit(rt, PY, str(TENANTS / "certified.py"), str(go), "2")
    wait_until(lambda: "waiting" in lines(rt, holder), 60, "the first region to end")
    clock_file.write_text(str(capped))  # the second region is granted power-capped
    go.touch()
    assert rt.krex("wait", holder).returncode == 0
    first, second = (json.loads(line) for line in lines(rt, holder) if line.startswith("{"))
    assert first["verdict"] == "verified" and "clock: 1980 MHz, within tolerance" in first["reasons"], first
    assert second["verdict"] == "verified", second
    note = "clock: 1395 MHz at the release (flags on the measurement, not interference: clock:1395MHz-below-top-1980MHz)"
    assert note in second["reasons"], second
    regions = json.loads(rt.krex("wait", "--json", holder).stdout)["regions"]
    assert [r["flags"] for r in regions] == [[], ["clock:1395MHz-below-top-1980MHz"]], regions
    # Every region on the node, the canary's included, is verified.
    verdicts = [e["verdict"] for e in trace_events(rt, "region_released")]
    assert verdicts and set(verdicts) == {"verified"}, verdicts
