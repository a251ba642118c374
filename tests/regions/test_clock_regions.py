"""Clock-aware regions on a simulated GPU whose SM clock the test moves
(KREX_SIM_SM_CLOCK_FILE): the settle step at entry (bounded, granted at once
when on-clock), the clock at the grant and at the release in the trace, and
`region().flags` naming an off-clock grant and an off-clock release."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from krex_runtime.regions.entry.settle import settle
from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.trace.jsonl import read_trace

PY = sys.executable
BOUND_S = 1.0
NOMINAL, LOW, HIGH = 1980, 1500, 2100  # 1500 MHz is 24% under the top clock: off by more than the 10% tolerance

# A tenant that holds one region (with its own settle bound, if given),
# optionally moves the simulated clock while holding it (so only the release
# is off-clock), and prints what region() said.
TENANT = """
import json, sys
from krex_runtime.client import RegionError, region
clock_file, inside, settle = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    with region(settle_s=None if settle == "-" else float(settle)) as r:
        entry = list(r.flags)
        if inside != "-":
            open(clock_file, "w").write(inside)
except RegionError as exc:
    print(json.dumps({"error": exc.code, "reason": exc.reason}))
    sys.exit(0)
print(json.dumps({"entry": entry, "after": r.flags, "off_clock": r.off_clock}))
"""


def test_settle_returns_at_the_first_on_clock_reading_and_at_the_bound() -> None:
    """The settle loop on a fake clock (no time passes for real): it stops at the
    first reading within tolerance, or at the first after the bound; without a
    baseline (on_clock None) it does not wait."""
    t = [0.0]
    readings = iter([False, False, True, False])
    probe = lambda gpu: {"sm_clock_mhz": 1500, "on_clock": next(readings), "flags": []}  # noqa: E731
    out = settle(probe, 0, max_s=1.0, poll_s=0.1, sleep=lambda s: t.__setitem__(0, t[0] + s), now=lambda: t[0])
    assert out["on_clock"] is True and abs(out["settle_s"] - 0.2) < 1e-9

    t[0] = 0.0
    off = lambda gpu: {"sm_clock_mhz": 1500, "on_clock": False, "flags": ["clock:x"]}  # noqa: E731
    out = settle(off, 0, max_s=0.35, poll_s=0.1, sleep=lambda s: t.__setitem__(0, t[0] + s), now=lambda: t[0])
    assert out["on_clock"] is False and abs(out["settle_s"] - 0.35) < 1e-9  # the last sleep is cut to the bound

    unknown = lambda gpu: {"sm_clock_mhz": None, "on_clock": None, "flags": []}  # noqa: E731
    slept: list[float] = []
    out = settle(unknown, 0, max_s=1.0, poll_s=0.1, sleep=slept.append, now=lambda: 0.0)
    assert out["on_clock"] is None and slept == []
    broken = settle(lambda gpu: 1 / 0, 0, max_s=1.0, poll_s=0.1, sleep=slept.append, now=lambda: 0.0)
    assert broken["on_clock"] is None and slept == []  # a failing probe is a missing reading, never an error

    # On its clock but still power-capped (the drained tenants' power history):
    # waited for until the cap clears; `gpu_idle` is no reason to wait.
    t[0] = 0.0
    throttles = iter([["sw_power_cap"], ["sw_power_cap", "gpu_idle"], ["gpu_idle"]])
    capped = lambda gpu: {"sm_clock_mhz": 1980, "on_clock": None, "throttle": next(throttles), "flags": []}  # noqa: E731
    out = settle(capped, 0, max_s=1.0, poll_s=0.1, sleep=lambda s: t.__setitem__(0, t[0] + s), now=lambda: t[0])
    assert out["throttle"] == ["gpu_idle"] and abs(out["settle_s"] - 0.2) < 1e-9


def _run(rt, clock_file: Path, inside: str = "-", settle: str = "-") -> dict:
    done = rt.krex("run", "--", PY, "-c", TENANT, str(clock_file), inside, settle)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_off_clock_regions_settle_to_the_bound_and_say_so(make_runtime, tmp_path: Path) -> None:
    clock_file = tmp_path / "sm_clock"
    clock_file.write_text(str(NOMINAL))
    rt = make_runtime(
        policy="krex", sim=1,
        runtime_env={"KREX_SIM_SM_CLOCK_FILE": str(clock_file)},
        extra_config=f"\n[regions]\nsettle_max_s = {BOUND_S}\nsettle_poll_s = 0.01\n",
    )  # fmt: skip

    clock_file.write_text(str(HIGH))  # above the GPU's top clock: recorded, never flagged
    assert _run(rt, clock_file) == {"entry": [], "after": [], "off_clock": False}
    clock_file.write_text(str(NOMINAL))
    on = _run(rt, clock_file)  # on-clock: granted without waiting, nothing flagged
    assert on == {"entry": [], "after": [], "off_clock": False}

    clock_file.write_text(str(LOW))  # off at the grant and at the release
    off = _run(rt, clock_file)
    flag = f"clock:{LOW}MHz-below-top-{NOMINAL}MHz"
    assert off["entry"] == [flag] and off["after"] == [flag, f"exit:{flag}"] and off["off_clock"] is True

    clock_file.write_text(str(NOMINAL))  # on at the grant, moved off while held: only the release says so
    late = _run(rt, clock_file, inside=str(LOW))
    assert late == {"entry": [], "after": [f"exit:{flag}"], "off_clock": True}

    # A region's own settle bound replaces the node's: none at all, or a
    # shorter one; one over regions.settle_cap_s (default 1 s) is refused.
    clock_file.write_text(str(LOW))
    assert _run(rt, clock_file, settle="0")["entry"] == [flag]
    assert _run(rt, clock_file, settle="0.2")["entry"] == [flag]
    over = _run(rt, clock_file, settle="2.5")
    assert over["error"] == "EINVAL" and "regions.settle_cap_s (1 s)" in over["reason"], over
    clock_file.write_text(str(NOMINAL))
    rt.stop()

    trace = read_trace(rt.trace_path).events
    granted = {e["region"]: e for e in trace if e["type"] == "region_granted" and e["kind"] == "region"}
    released = {e["region"]: e for e in trace if e["type"] == "region_released" and e["kind"] == "region"}
    ours = list(granted)[-5:]
    assert len(ours) == 5, granted
    first, second, third, none, short = (granted[r] for r in ours)
    assert none["settle_max_s"] == 0 and none["settle_s"] == 0 and none["on_clock"] is False
    assert short["settle_max_s"] == 0.2 and short["settle_s"] >= 0.2 and short["on_clock"] is False
    assert second["settle_max_s"] == BOUND_S
    # `krex trace` counts the regions that waited and the GPU time it cost.
    from krex_runtime.wire.trace.summary import summarize

    waits = [e["settle_s"] for e in granted.values() if e["settle_s"]]
    gpu = summarize(read_trace(rt.trace_path))["regions_per_gpu"]["0"]
    assert gpu["settled"] == len(waits) >= 2 and abs(gpu["settle_total_s"] - sum(waits)) < 1e-6
    assert first["on_clock"] is True and first["settle_s"] < BOUND_S and first["sm_clock_mhz"] == NOMINAL
    # Off-clock, the entry waited for the clock until the bound, then granted, saying so.
    assert second["on_clock"] is False and BOUND_S <= second["settle_s"] < 10 * BOUND_S
    assert second["enter_s"] >= second["settle_s"] and second["sm_clock_mhz"] == LOW
    assert second["power_w"] is not None and second["temp_c"] is not None
    assert released[ours[1]]["exit_sm_clock_mhz"] == LOW and released[ours[1]]["exit_on_clock"] is False
    assert released[ours[1]]["exit_flags"] == [flag] and released[ours[1]]["exit_power_w"] is not None
    assert third["on_clock"] is True and released[ours[2]]["exit_flags"] == [flag]
    assert released[ours[0]]["exit_flags"] == [] and released[ours[0]]["exit_on_clock"] is True

    # The reducer keeps them with the command's regions (what `krex run --json` and the API show).
    state = node_state.NodeState()
    for event in trace:
        node_state.apply(state, event)
    record = state.commands[second["command_id"]].regions[0]
    assert record["on_clock"] is False and record["exit_flags"] == [flag] and record["settle_s"] >= BOUND_S
    # The inflation estimate from these records (no canary): what the clock cost each verified region.
    estimate = state.gpus[0].estimate
    cost = NOMINAL / LOW - 1
    assert estimate["regions"] == 6 and estimate["flagged"] == 4, estimate
    assert [round(c, 6) for c in sorted(estimate["clock_costs"])] == [0.0] * 2 + [round(cost, 6)] * 4, estimate
    assert round(estimate["inside_p50"], 6) == round(cost, 6) and round(estimate["inside_p95"], 6) == round(cost, 6)


def test_a_settle_bound_out_of_range_is_refused_before_anything_is_asked() -> None:
    import pytest

    from krex_runtime.client import region

    for bad in (-0.1, 10.5, float("nan")):
        with pytest.raises(ValueError, match="settle_s must be within"):
            region(settle_s=bad)
    assert region(settle_s=0.5).settle_s == 0.5 and region().settle_s is None
