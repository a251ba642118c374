"""The SM clock of each GPU now, and whether a measurement taken at it can be
trusted: the GPU throttles, or runs far from the clock its canary baseline was
taken at. Recorded at every region entry and exit and with every canary
sample, so power-state noise is told apart from interference."""

from __future__ import annotations

from typing import Any


class Clocks:
    def __init__(self, sampler: Any, tolerance: float) -> None:  # a gpu_metrics sampler
        self.sampler = sampler
        self.tolerance = tolerance
        self.baseline: dict[int, float] = {}  # GPU index -> SM clock of its canary baseline

    def now(self, gpu: int) -> dict[str, Any]:
        """SM clock, throttle reasons, power and temperature right now, what is
        wrong with them (`flags`) and whether the clock is within the tolerance
        of the baseline (`on_clock`; None: no baseline or no reading)."""
        try:
            read = getattr(self.sampler, "clock_sample", None) or self.sampler.sample
            sample = read(gpu)
        except Exception:
            sample = {}
        clock = {
            "sm_clock_mhz": sample.get("sm_clock_mhz"),
            "throttle": sample.get("throttle"),
            "power_w": sample.get("power_w"),
            "temp_c": sample.get("temp_c"),
        }
        return clock | {"flags": self.flags(gpu, clock), "on_clock": self.on_clock(gpu, clock.get("sm_clock_mhz"))}

    def on_clock(self, gpu: int, mhz: float | None) -> bool | None:
        base = self.baseline.get(gpu)
        if not base or not mhz:
            return None
        return abs(mhz / base - 1) <= self.tolerance

    def flags(self, gpu: int, clock: dict[str, Any]) -> list[str]:
        flags = [f"throttled:{reason}" for reason in clock.get("throttle") or []]
        base, now = self.baseline.get(gpu), clock.get("sm_clock_mhz")
        if self.on_clock(gpu, now) is False:
            flags.append(f"clock:{now:.0f}MHz-vs-baseline-{base:.0f}MHz")
        return flags
