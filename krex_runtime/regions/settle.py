"""The settle step at the end of a region's entry: with the other tenants
gated, drained and frozen, wait until the SM clock is back within tolerance of
its baseline (telemetry/clocks.py: the canary baseline and
`telemetry.clock_tolerance`), or until the bound passes, whichever comes first.

Why: a power-capped GPU that has just run other tenants' heavy kernels runs
below its clock for a while after they stop; a measurement started at once
reads the power state it inherited, not the candidate. An idle GPU (everyone
else drained) sheds that state within milliseconds. The wait is bounded
(`regions.settle_max_s`, 0 = no settle): every millisecond of it is one no
tenant may use the GPU. Where there is no baseline (no canary yet) or no clock
reading, there is nothing to settle against and the region is granted at once.
"""

from __future__ import annotations

import time
from typing import Any, Callable

ClockProbe = Callable[[int], dict[str, Any]]


def settle(
    probe: ClockProbe,
    gpu: int,
    max_s: float,
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The clock at the grant (the probe's reading) with `settle_s`, the seconds
    spent waiting for it, and `on_clock` (None: unknown)."""
    t0 = now()
    clock = _read(probe, gpu)
    while max_s > 0 and clock.get("on_clock") is False:
        left = max_s - (now() - t0)
        if left <= 0:
            break
        sleep(min(poll_s, left))
        clock = _read(probe, gpu)
    return clock | {"settle_s": now() - t0 if max_s > 0 else 0.0, "on_clock": clock.get("on_clock")}


def _read(probe: ClockProbe, gpu: int) -> dict[str, Any]:
    try:
        return dict(probe(gpu))
    except Exception:  # a probe that fails is a missing reading, never a refused region
        return {"sm_clock_mhz": None, "throttle": None, "flags": [], "on_clock": None}
