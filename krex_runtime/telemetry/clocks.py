"""The SM clock of each GPU now, and what it says of a measurement taken at
it. Recorded at every region entry and exit and with every canary sample, so
power-state noise is told apart from interference.

A clock is judged against what the GPU itself is set to hold (its application
clock, else its highest; on an AMD GPU its GFX clock's highest, AMD SMI's
max_clk: `top`), never against a sample taken earlier: a
baseline sampled while other tenants held the GPU under its power cap made
every later region at the top clock look wrong. So:

- a clock at or above `top` less `telemetry.clock_tolerance` is on clock
  (a clock above a sample taken under load is only recorded);
- a lower clock is a flag on the measurement (`clock:<now>MHz-below-top-<top>MHz`),
  unless NVML says the GPU is merely idle (AMD SMI: its GFX clock in deep
  sleep; its clock comes back with work);
- power and thermal throttle reasons are flags too (`throttled:<reason>`;
  an application-clock or sync-boost reason is a setting, not a state; AMD
  GPUs' power and thermal violations are named in telemetry/amd_smi.py).

Flags describe the conditions of a measurement for its reader
(`region().flags`, the result, the bench); they are never evidence that
another tenant ran inside a region (regions/certificate.py).
"""

from __future__ import annotations

from typing import Any

from krex_runtime.regions.entry.settle import POWER_STATES


class Clocks:
    def __init__(self, sampler: Any, tolerance: float) -> None:  # a gpu_metrics sampler
        self.sampler = sampler
        self.tolerance = tolerance
        self._top: dict[int, float | None] = {}  # GPU index -> the SM clock it is set to hold

    def top(self, gpu: int) -> float | None:
        """The GPU's application (else highest) SM clock, read once (None: unknown)."""
        if gpu not in self._top:
            try:
                self._top[gpu] = self.sampler.top_clock(gpu)
            except Exception:  # a sampler that cannot say: nothing to judge against
                self._top[gpu] = None
        return self._top[gpu]

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None:
        """The SM clock's samples since `since_us` (wall-clock us) where the GPU
        keeps them (NVML's sample buffer, the simulated clock's log); None: n/a."""
        try:
            history: list[tuple[int, float]] | None = self.sampler.clock_history(gpu, since_us)
            return history
        except Exception:  # missing data is a value
            return None

    def now(self, gpu: int) -> dict[str, Any]:
        """SM clock, throttle reasons, power and temperature right now, what is
        wrong with them (`flags`), the GPU's top clock and whether the clock is
        near it (`on_clock`; None: unknown, or the GPU is idle)."""
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
            "top_clock_mhz": self.top(gpu),
        }
        on_clock = self.on_clock(gpu, clock["sm_clock_mhz"], bool(sample.get("idle")))
        return clock | {"flags": self.flags(gpu, clock, on_clock), "on_clock": on_clock}

    def on_clock(self, gpu: int, mhz: float | None, idle: bool = False) -> bool | None:
        top = self.top(gpu)
        if not top or not mhz:
            return None
        if mhz >= top * (1 - self.tolerance):
            return True
        return None if idle else False

    def flags(self, gpu: int, clock: dict[str, Any], on_clock: bool | None) -> list[str]:
        flags = [f"throttled:{reason}" for reason in clock.get("throttle") or [] if reason in POWER_STATES]
        if on_clock is False:
            flags.append(f"clock:{clock['sm_clock_mhz']:.0f}MHz-below-top-{self.top(gpu):.0f}MHz")
        return flags
