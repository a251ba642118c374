"""The SM clock of each GPU now, and whether a measurement taken at it can be
trusted: the GPU throttles, or runs far from the clock its canary baseline was
taken at. Recorded at every region entry and with every canary sample, so
power-state noise is told apart from interference."""

from __future__ import annotations

from typing import Any



class Clocks:
    def __init__(self, sampler: Any, tolerance: float) -> None:  # a gpu_metrics sampler
        self.sampler = sampler
        self.tolerance = tolerance
        self.baseline: dict[int, float] = {}  # GPU index -> SM clock of its canary baseline

    def now(self, gpu: int) -> dict[str, Any]:
        """SM clock, throttle reasons and what is wrong with them, right now."""
        try:
            sample = self.sampler.sample(gpu)
        except Exception:
            sample = {}
        clock = {"sm_clock_mhz": sample.get("sm_clock_mhz"), "throttle": sample.get("throttle")}
        return clock | {"flags": self.flags(gpu, clock)}

    def flags(self, gpu: int, clock: dict[str, Any]) -> list[str]:
        flags = [f"throttled:{reason}" for reason in clock.get("throttle") or []]
        base, now = self.baseline.get(gpu), clock.get("sm_clock_mhz")
        if base and now and abs(now / base - 1) > self.tolerance:
            flags.append(f"clock:{now:.0f}MHz-vs-baseline-{base:.0f}MHz")
        return flags
