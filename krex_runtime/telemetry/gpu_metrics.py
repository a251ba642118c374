"""Per-GPU metrics: NVML on real NVIDIA GPUs (AMD SMI on AMD ones:
telemetry/amd_smi.py; telemetry/sources.py picks), the simulator's device on
simulated ones.

Every metric is read on its own; one that fails or is missing is None (shown
as "n/a"), never an exception out of the sampler. Simulated GPUs report the
simulated device's own figures (its busy time, its tenants' allocations, its
heat model's temperature and SM clock: SimulatedSampler), with
`simulated: true`.

KREX_TELEMETRY_FAULTS (comma-separated metric names, or "all") makes those
metrics fail, to exercise the n/a path on purpose; KREX_SIM_THROTTLE makes a
simulated GPU report throttle reasons, KREX_SIM_SM_CLOCK_FILE moves its SM
clock (a file holding MHz, read at every sample, so a test can take the clock
off its baseline and back while the runtime runs).

`clock_sample(gpu)` reads only what a region records at its entry and exit
(SM clock, throttle reasons, power, temperature): the settle step polls it, so
it leaves out the slower reads (process list, memory, utilisation).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from krex_runtime.node.gpus import Gpu
from krex_runtime.sim import heat
from krex_runtime.sim import layout as sim_layout

METRICS = ("util_pct", "mem_used", "mem_total", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "throttle", "processes")

# NVML throttle reasons that mean the GPU runs below its clocks for a reason a
# measurement should know about (idle and application-clock settings are not).
THROTTLE_REASONS = {
    0x0000000000000002: "applications_clocks",
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000010: "sync_boost",
    0x0000000000000020: "sw_thermal",
    0x0000000000000040: "hw_thermal",
    0x0000000000000080: "hw_power_brake",
    0x0000000000000100: "display_clocks",
}
GPU_IDLE = 0x0000000000000001  # NVML: nothing runs, the clock is down for that alone (not a throttle)
SIMULATED_SM_CLOCK_MHZ = sim_layout.TOP_SM_CLOCK_MHZ
SIMULATED_MEM_CLOCK_MHZ = 3201
SIM_SM_CLOCK_FILE = "KREX_SIM_SM_CLOCK_FILE"
CLOCK_METRICS = ("sm_clock_mhz", "throttle", "idle", "power_w", "temp_c")


def injected_faults() -> set[str]:
    raw = os.environ.get("KREX_TELEMETRY_FAULTS", "")
    names = {n.strip() for n in raw.split(",") if n.strip()}
    return set(METRICS) if "all" in names else names


T = TypeVar("T")


def _read(name: str, faults: set[str], fn: Callable[[], T]) -> T | None:
    if name in faults:
        return None
    try:
        return fn()
    except Exception:  # any NVML or /proc failure is a missing value
        return None


class NvmlSampler:
    def __init__(self, gpus: list[Gpu]) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = {g.index: pynvml.nvmlDeviceGetHandleByIndex(g.index) for g in gpus}

    def sample(self, gpu: int) -> dict[str, Any]:
        nv, h, faults = self.nvml, self.handles[gpu], injected_faults()
        memory = _read("mem_used", faults, lambda: nv.nvmlDeviceGetMemoryInfo(h))
        return {
            "util_pct": _read("util_pct", faults, lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            "mem_used": int(memory.used) if memory is not None else None,
            "mem_total": _read("mem_total", faults, lambda: int(nv.nvmlDeviceGetMemoryInfo(h).total)),
            "sm_clock_mhz": _read("sm_clock_mhz", faults, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "mem_clock_mhz": _read("mem_clock_mhz", faults, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            "temp_c": _read("temp_c", faults, lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "power_w": _read("power_w", faults, lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            "throttle": _read("throttle", faults, lambda: throttle_names(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))),
            "processes": _read(
                "processes", faults, lambda: len(nv.nvmlDeviceGetComputeRunningProcesses(h))
            ),
            "simulated": False,
        }

    def clock_sample(self, gpu: int) -> dict[str, Any]:
        nv, h, faults = self.nvml, self.handles[gpu], injected_faults()
        mask = _read("throttle", faults, lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        return {
            "sm_clock_mhz": _read("sm_clock_mhz", faults, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "throttle": throttle_names(mask) if mask is not None else None,
            "idle": bool(mask & GPU_IDLE) if mask is not None else None,
            "power_w": _read("power_w", faults, lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            "temp_c": _read("temp_c", faults, lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        }

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None:
        """The SM clock's samples since `since_us` (wall-clock us), from the
        driver's own sample buffer: it samples on its own, so reading it costs
        one call at the release and nothing during the hold (None: n/a)."""
        nv, h = self.nvml, self.handles[gpu]
        if "sm_clock_mhz" in injected_faults():
            return None
        try:
            _kind, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_PROCESSOR_CLK_SAMPLES, since_us)
        except nv.NVMLError as exc:
            # No sample since then: the buffer says so with NOT_FOUND.
            return [] if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_FOUND else None
        except Exception:
            return None
        return [(int(x.timeStamp), float(x.sampleValue.uiVal)) for x in samples if x.timeStamp >= since_us]

    def top_clock(self, gpu: int) -> float | None:
        """The SM clock this GPU is set to hold: its application clock where
        one is set, else its highest (None: NVML does not say)."""
        nv, h = self.nvml, self.handles[gpu]
        app = _read("sm_clock_mhz", set(), lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM))
        top = _read("sm_clock_mhz", set(), lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
        return float(app) if app else float(top) if top else None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


class SimulatedSampler:
    """The simulated device's own figures, read from its file as NVML reads a
    GPU's: utilisation is the share of the last sample period during which it
    executed work (its busy time), memory what its live processes allocated,
    and its temperature and SM clock are its heat model's (sim/heat.py; the
    clock falls with the heat only where the model is on, gpus.simulated_heat).
    Labelled simulated: nothing here is a GPU figure."""

    def __init__(self, device_name: str, memory_total: int) -> None:
        self.device_name = device_name
        self.memory_total = memory_total
        # GPU index -> (busy_ns, monotonic ns) at its last sample(): the start of the next utilisation period.
        self._busy_at: dict[int, tuple[int, int]] = {}

    def sample(self, gpu: int) -> dict[str, Any]:
        faults = injected_faults()
        device = self._device()
        now = time.monotonic_ns()
        busy = _read("busy", set(), lambda: self._utilisation(device, gpu, now))  # advances the period even when faulted
        sensors = _read("sensors", set(), lambda: self._sensors(device, gpu, now))
        return {
            "util_pct": None if "util_pct" in faults else busy,
            "mem_used": _read("mem_used", faults, lambda: device.mem_used(gpu) if device else 0),
            "mem_total": None if "mem_total" in faults else self.memory_total,
            "sm_clock_mhz": _read("sm_clock_mhz", faults, lambda: self._sm_clock(sensors)),
            "mem_clock_mhz": None if "mem_clock_mhz" in faults else SIMULATED_MEM_CLOCK_MHZ,
            "temp_c": _read("temp_c", faults, lambda: None if sensors is None else round(sensors.temp_c, 1)),
            # The period's mean power, as NVML averages it: idle draw plus the busy share's.
            "power_w": _read("power_w", faults, lambda: None if busy is None else _simulated_power(busy / 100)),
            "throttle": None if "throttle" in faults else simulated_throttle(),
            "processes": _read("processes", faults, lambda: device.active(gpu) if device else 0),
            "simulated": True,
        }

    def clock_sample(self, gpu: int) -> dict[str, Any]:
        """What a region's entry and exit record, now: leaves the utilisation period to sample()."""
        faults = injected_faults()
        device = self._device()
        sensors = _read("sensors", set(), lambda: self._sensors(device, gpu, time.monotonic_ns()))
        active = _read("power_w", faults, lambda: device.active(gpu) if device else 0)
        return {
            "sm_clock_mhz": _read("sm_clock_mhz", faults, lambda: self._sm_clock(sensors)),
            "throttle": None if "throttle" in faults else simulated_throttle(),
            "idle": False,
            "power_w": None if active is None else _simulated_power(1.0 if active else 0.0),
            "temp_c": _read("temp_c", faults, lambda: None if sensors is None else round(sensors.temp_c, 1)),
        }

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None:
        """The clock file's log since `since_us` where KREX_SIM_SM_CLOCK_FILE is
        set (simulated_clock_log); else the device's clock now (it keeps no
        sample buffer: one sample, taken now)."""
        if "sm_clock_mhz" in injected_faults():
            return None
        if os.environ.get(SIM_SM_CLOCK_FILE):
            return simulated_clock_log(since_us)
        clock = self._sm_clock(self._sensors(self._device(), gpu, time.monotonic_ns()))
        return [(int(time.time() * 1e6), clock)] if clock is not None else None

    def top_clock(self, gpu: int) -> float | None:
        """The simulated GPU's top clock (the heat, or KREX_SIM_SM_CLOCK_FILE, moves only the current one)."""
        return float(SIMULATED_SM_CLOCK_MHZ)

    def _device(self) -> Any:
        """The device file now (sim/device_file.py; None: no tenant has laid it out yet)."""
        from krex_runtime.sim.device_file import read_device

        try:
            return read_device(self.device_name)
        except FileNotFoundError:
            return None

    def _utilisation(self, device: Any, gpu: int, now: int) -> float:
        """Percent of the time since this GPU's last sample() during which it
        executed work; the first sample says whether it does now."""
        busy = device.loads[gpu].busy_ns if device is not None else 0
        last = self._busy_at.get(gpu)
        self._busy_at[gpu] = (busy, now)
        if last is None or now <= last[1]:
            return 100.0 if device is not None and device.active(gpu) else 0.0
        return round(min(100.0, max(0.0, 100 * (busy - last[0]) / (now - last[1]))), 1)

    def _sensors(self, device: Any, gpu: int, now: int) -> heat.Sensors:
        if device is None:
            return heat.sensors(heat.DeviceLoad(), False, now)
        return heat.sensors(device.loads[gpu], device.heat, now)

    @staticmethod
    def _sm_clock(sensors: heat.Sensors | None) -> float | None:
        """KREX_SIM_SM_CLOCK_FILE's clock where the file holds one (a test moves
        the clock by hand), else the device's own."""
        rows = _clock_file()
        if rows:
            return rows[-1][1]
        return float(sensors.sm_clock_mhz) if sensors is not None else None

    def close(self) -> None:
        pass


SIMULATED_IDLE_W, SIMULATED_BUSY_W = 100.0, 600.0


def _simulated_power(busy_share: float) -> float:
    return round(SIMULATED_IDLE_W + (SIMULATED_BUSY_W - SIMULATED_IDLE_W) * busy_share, 1)


def simulated_throttle() -> list[str]:
    """KREX_SIM_THROTTLE names throttle reasons a simulated GPU reports, so the
    flagging of throttled measurements can be exercised without a GPU."""
    return [r for r in os.environ.get("KREX_SIM_THROTTLE", "").split(",") if r]


def _clock_file() -> list[tuple[int | None, float]]:
    """KREX_SIM_SM_CLOCK_FILE's lines: `MHZ`, or `WALL_US MHZ` (a log of the
    clock's changes, appended as they happen, like a GPU's sample buffer)."""
    path = os.environ.get(SIM_SM_CLOCK_FILE)
    if not path:
        return []
    try:
        with open(path) as f:
            text = f.read()
    except OSError:  # no file yet: the nominal clock
        return []
    rows: list[tuple[int | None, float]] = []
    for line in text.splitlines():
        parts = line.split()
        try:
            rows.append((None, float(parts[0])) if len(parts) == 1 else (int(parts[0]), float(parts[1])))
        except (ValueError, IndexError):  # half written: skipped
            continue
    return rows


def simulated_clock_log(since_us: int) -> list[tuple[int, float]]:
    """The simulated clock from `since_us` on: the value in effect then, and
    every logged change after it (untimed lines count as in effect from the start)."""
    rows = _clock_file()
    at_start: float = SIMULATED_SM_CLOCK_MHZ
    later: list[tuple[int, float]] = []
    for t, mhz in rows:
        if t is None or t < since_us:
            at_start = mhz
        else:
            later.append((t, mhz))
    return [(since_us, at_start), *later]


class UnavailableSampler:
    """NVML (or AMD SMI) could not be opened: every metric is n/a, and the service goes on."""

    def sample(self, gpu: int) -> dict[str, Any]:
        return {m: None for m in METRICS} | {"simulated": False}

    def clock_sample(self, gpu: int) -> dict[str, Any]:
        return {m: None for m in CLOCK_METRICS}

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None:
        return None

    def top_clock(self, gpu: int) -> float | None:
        return None

    def close(self) -> None:
        pass


def sample_all(sampler: Any, gpus: list[Gpu]) -> dict[str, dict[str, Any]]:
    t = time.time()
    out = {}
    for g in gpus:
        try:
            out[str(g.index)] = sampler.sample(g.index) | {"time": t}
        except Exception:
            out[str(g.index)] = {m: None for m in METRICS} | {"simulated": g.simulated, "time": t}
    return out
