"""The SM clock, throttle reasons, power and temperature while a command's repeats run.

The clock read at the start and at the end of the repeats misses what happens
between them: on the H200 (docs/BENCHMARKS.md, run 8) a long fp32 GEMM inside
a verified region ran 8-48% slower over one of its four placements while
both reads said 1980 MHz and the region's flags said nothing. A thread reads
the clock, the throttle reasons, the power and the temperature every
`--watch-clock-ms` (PERIOD_S when built without one) while the repeats run, so
the result line says the lowest clock and every reason seen, and the report
can tell a power-state dip from interference.

NVML's calls go through ctypes, which lets go of the GIL: the thread does not
hold up the launching thread beyond the few microseconds of Python around
each read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

PERIOD_S = 0.01

# NVML's throttle-reason bits, by the names the runtime's region flags use
# (krex_bench keeps to the runtime's public surface, so not imported from its
# telemetry). Idle is left out: it is no reason for a measurement to be slow.
REASONS = {
    0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks",
}

# (SM clock in MHz, NVML throttle-reason bits, power in mW, temperature in C);
# any of them None where unknown.
Reading = tuple[int | None, int | None, int | None, int | None]
Reader = Callable[[], Reading]


class ClockWatch:
    def __init__(self, read: Reader | None, period_s: float = PERIOD_S) -> None:
        self.read = read
        self.period_s = period_s
        # (time.monotonic() after the read, the reading): kept whole, so the
        # part of the repeats each placement ran in can be summarized on its own.
        self.samples: list[tuple[float, Reading]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ClockWatch:
        if self.read is not None:
            self._thread = threading.Thread(target=self._watch, name="krex-bench-clock-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            # Bounded: an NVML call that hangs must not keep the command's
            # region held; the daemon thread is left behind, and says so.
            self._thread.join(timeout=max(1.0, 10 * self.period_s))
            if self._thread.is_alive():
                self.failed += 1

    def _watch(self) -> None:
        assert self.read is not None
        while True:
            self._sample()
            if self._stop.wait(self.period_s):
                self._sample()  # the last one, at the end of the repeats
                return

    def _sample(self) -> None:
        assert self.read is not None
        try:
            reading = self.read()
        except Exception:  # one read that fails is a missing sample, not a failed measurement
            self.failed += 1
            return
        self.samples.append((time.monotonic(), reading))

    def summary(self) -> dict[str, Any]:
        """What the result line carries: the lowest and highest clock seen,
        how many samples, the throttle reasons seen in any of them, the
        highest power and the temperature's range (None where nothing could
        be read). A power cap that a hot GPU reaches only part way through a
        long kernel shows here: power at the limit, the clock down, the
        temperature above native's."""
        summary = _summarize([r for _, r in list(self.samples)])
        return {"watch_failed": self.failed, **summary}

    def windows(self, marks: list[float]) -> list[dict[str, Any]]:
        """The same summary for each span between consecutive `marks`
        (time.monotonic() values, in order): one per placement, so the report
        can say whether a placement that ran slow ran at a lower clock or
        under a power state. A span no sample fell in says None throughout."""
        samples = list(self.samples)
        spans = []
        for start, end in pairwise(marks):
            summary = _summarize([r for t, r in samples if start <= t < end])
            spans.append({k: summary[k] for k in ("clock_samples", "sm_clock_min_mhz", "throttle_seen",
                                                  "power_max_w", "temp_max_c")})
        return spans


def _summarize(readings: list[Reading]) -> dict[str, Any]:
    clocks = [int(c) for c, _, _, _ in readings if c]
    reasons = [int(r) for _, r, _, _ in readings if r is not None]
    power = [int(p) for _, _, p, _ in readings if p]
    temps = [int(t) for _, _, _, t in readings if t]
    seen = 0
    for bits in reasons:
        seen |= bits
    return {
        "power_max_w": max(power) / 1000 if power else None,
        "temp_min_c": min(temps) if temps else None,
        "temp_max_c": max(temps) if temps else None,
        "sm_clock_min_mhz": min(clocks) if clocks else None,
        "sm_clock_max_mhz": max(clocks) if clocks else None,
        "clock_samples": len(clocks),
        # None, not []: no sample said, which is not "none seen".
        "throttle_seen": [name for bit, name in REASONS.items() if seen & bit] if reasons else None,
    }


def nvml_reader(nvml: Any, handle: Any) -> Reader:
    """The clock, throttle reasons, power and temperature of one GPU through
    pynvml, each read on its own (the reasons' call under its current name
    where this pynvml has it)."""
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def field(get: Callable[[], Any]) -> int | None:
        try:
            return int(get())
        except Exception:  # one the GPU does not report (power under MIG or vGPU): that field is None
            return None

    def read() -> Reading:
        return (
            field(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            field(lambda: reasons(handle)),
            field(lambda: nvml.nvmlDeviceGetPowerUsage(handle)),
            field(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        )

    return read
