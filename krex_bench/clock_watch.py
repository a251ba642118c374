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
from typing import Any, Callable

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
        self.clocks: list[int] = []
        self.reasons = 0
        self.power_mw: list[int] = []
        self.temps: list[int] = []
        self.failed = 0
        self.samples = 0  # readings that came back (each field may still be None)
        self.reason_samples = 0  # of them, those with the throttle reasons
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
            clock, reasons, power_mw, temp_c = self.read()
        except Exception:  # one read that fails is a missing sample, not a failed measurement
            self.failed += 1
            return
        self.samples += 1
        if clock:
            self.clocks.append(int(clock))
        if reasons is not None:
            self.reason_samples += 1
            self.reasons |= int(reasons)
        if power_mw:
            self.power_mw.append(int(power_mw))
        if temp_c:
            self.temps.append(int(temp_c))

    def summary(self) -> dict[str, Any]:
        """What the result line carries: the lowest and highest clock seen,
        how many samples, the throttle reasons seen in any of them, the
        highest power and the temperature's range (None where nothing could
        be read). A power cap that a hot GPU reaches only part way through a
        long kernel shows here: power at the limit, the clock down, the
        temperature above native's."""
        if self.read is None or not self.samples:
            return {"sm_clock_min_mhz": None, "sm_clock_max_mhz": None, "clock_samples": 0, "throttle_seen": None,
                    "power_max_w": None, "temp_min_c": None, "temp_max_c": None, "watch_failed": self.failed}
        return {
            "watch_failed": self.failed,
            "power_max_w": max(self.power_mw) / 1000 if self.power_mw else None,
            "temp_min_c": min(self.temps) if self.temps else None,
            "temp_max_c": max(self.temps) if self.temps else None,
            "sm_clock_min_mhz": min(self.clocks) if self.clocks else None,
            "sm_clock_max_mhz": max(self.clocks) if self.clocks else None,
            "clock_samples": len(self.clocks),
            # None, not []: no sample said, which is not "none seen".
            "throttle_seen": [name for bit, name in REASONS.items() if self.reasons & bit] if self.reason_samples else None,
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
