"""The settle step at the end of a region's entry: with the other tenants
gated, drained and frozen, wait until the GPU has shed the power state their
work left, or until the bound passes, whichever comes first.

Why: a power-capped GPU that has just run other tenants' heavy kernels runs
below its clock for a while after they stop; a measurement started at once
reads the power state it inherited, not the candidate. An idle GPU (everyone
else drained) sheds that state within tens to hundreds of milliseconds.

The runtime decides, not the candidate: the wait happens only where the
reading at the grant shows that state (a power or thermal throttle reason,
POWER_STATES, or an SM clock below what the GPU is set to hold:
telemetry/clocks.py), so a region granted on a settled GPU waits nothing and
an unmodified harness's long kernels are protected without asking. It is
bounded (`regions.settle_max_s`, default 0.5 s; 0 = never; a region may ask
its own bound with `region(settle_s=...)`): every millisecond of it is one no
tenant may use the GPU. Where there is no clock reading, there is nothing to
settle against and the region is granted at once.

A clock within tolerance is not enough on its own: on the H200 the regions
whose long (>10 ms) kernels measured 0.6-1.1% slow were, nearly all, granted
while NVML still reported `sw_power_cap` from the drained tenants' work, at a
clock within 10% of the one they were measured at alone. So the wait also
lasts while the GPU reports a power or thermal throttle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

ClockProbe = Callable[[int], dict[str, Any]]

# Throttle reasons that are inherited power state, which an idle GPU sheds:
# not `gpu_idle` or `applications_clocks` (settings, not history). NVML's
# names, then AMD SMI's violations (telemetry/amd_smi.py).
POWER_STATES = frozenset({
    "sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake",
    "ppt_power", "socket_thermal", "prochot_thermal", "vr_thermal", "hbm_thermal", "smu_throttle",
})


def settle(
    probe: ClockProbe,
    gpu: int,
    max_s: float,
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The clock at the grant (the probe's reading) with `settle_s`, the seconds
    spent waiting for it, and `on_clock` (None: unknown). Waits while the
    reading is `unsettled`, at most `max_s`."""
    t0 = now()
    clock = _read(probe, gpu)
    waited = False  # a grant whose first reading is settled waited nothing: settle_s 0
    while max_s > 0 and unsettled(clock):
        left = max_s - (now() - t0)
        if left <= 0:
            break
        sleep(min(poll_s, left))
        waited = True
        clock = _read(probe, gpu)
    return clock | {"settle_s": now() - t0 if waited else 0.0, "on_clock": clock.get("on_clock")}


def unsettled(clock: dict[str, Any]) -> bool:
    """Below the GPU's top clock (not merely idle), or throttled by power or heat."""
    return clock.get("on_clock") is False or bool(POWER_STATES.intersection(clock.get("throttle") or ()))


def _read(probe: ClockProbe, gpu: int) -> dict[str, Any]:
    try:
        return dict(probe(gpu))
    except Exception:  # a probe that fails is a missing reading, never a refused region
        return {"sm_clock_mhz": None, "throttle": None, "flags": [], "on_clock": None}
