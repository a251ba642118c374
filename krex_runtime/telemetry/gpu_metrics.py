"""Per-GPU metrics: NVML on real NVIDIA GPUs (AMD SMI on AMD ones:
telemetry/amd_smi.py; telemetry/sources.py picks), the simulator's device on
simulated ones.

Every metric is read on its own; one that fails or is missing is None (shown
as "n/a"), never an exception out of the sampler. Simulated GPUs report
values derived from the simulated device, with `simulated: true`.

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
from typing import Any, Callable

from krex_runtime.node.gpus import Gpu

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
SIMULATED_SM_CLOCK_MHZ = 1980
SIMULATED_MEM_CLOCK_MHZ = 3201
SIM_SM_CLOCK_FILE = "KREX_SIM_SM_CLOCK_FILE"
CLOCK_METRICS = ("sm_clock_mhz", "throttle", "idle", "power_w", "temp_c")


def injected_faults() -> set[str]:
    raw = os.environ.get("KREX_TELEMETRY_FAULTS", "")
    names = {n.strip() for n in raw.split(",") if n.strip()}
    return set(METRICS) if "all" in names else names


def _read(name: str, faults: set[str], fn: Callable[[], Any]) -> Any:
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
    """Values derived from the simulated device; labelled simulated."""

    def __init__(self, device_name: str, memory_total: int) -> None:
        self.device_name = device_name
        self.memory_total = memory_total

    def sample(self, gpu: int) -> dict[str, Any]:
        faults = injected_faults()
        active = _read("util_pct", faults, lambda: self._active(gpu))
        busy = 1.0 if active else 0.0
        return {
            "util_pct": 100 * busy if active is not None else None,
            "mem_used": _read("mem_used", faults, lambda: self._mem_used(gpu)),
            "mem_total": None if "mem_total" in faults else self.memory_total,
            "sm_clock_mhz": None if "sm_clock_mhz" in faults else simulated_sm_clock(),
            "mem_clock_mhz": None if "mem_clock_mhz" in faults else SIMULATED_MEM_CLOCK_MHZ,
            "temp_c": None if "temp_c" in faults else 30 + 40 * busy,
            "power_w": None if "power_w" in faults else 100 + 500 * busy,
            "throttle": None if "throttle" in faults else simulated_throttle(),
            "processes": active,
            "simulated": True,
        }

    def clock_sample(self, gpu: int) -> dict[str, Any]:
        return {k: v for k, v in self.sample(gpu).items() if k in CLOCK_METRICS} | {"idle": False}

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None:
        """The simulated clock's log since `since_us` (simulated_clock_log)."""
        return None if "sm_clock_mhz" in injected_faults() else simulated_clock_log(since_us)

    def top_clock(self, gpu: int) -> float | None:
        """The simulated GPU's nominal clock (KREX_SIM_SM_CLOCK_FILE moves only the current one)."""
        return float(SIMULATED_SM_CLOCK_MHZ)

    def _active(self, gpu: int) -> int:
        from krex_runtime.sim.device_file import active_count

        try:
            return active_count(self.device_name, gpu)
        except FileNotFoundError:  # no tenant has opened the simulated device yet
            return 0

    def _mem_used(self, gpu: int) -> int:
        """What the device's live processes hold allocated on it (the simulator's per-process mem_used)."""
        from krex_runtime.sim.device_file import read_device

        try:
            state = read_device(self.device_name)
        except FileNotFoundError:
            return 0
        return sum(int(s.mem_used[gpu]) for s in state.slots if s.alive)

    def close(self) -> None:
        pass


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


def simulated_sm_clock() -> float:
    """The simulated GPU's SM clock: the last value KREX_SIM_SM_CLOCK_FILE holds, else the nominal clock."""
    rows = _clock_file()
    return rows[-1][1] if rows else SIMULATED_SM_CLOCK_MHZ


def simulated_clock_log(since_us: int) -> list[tuple[int, float]]:
    """The simulated clock from `since_us` on: the value in effect then, and
    every logged change after it (untimed lines count as in effect from the start)."""
    rows = _clock_file()
    at_start = SIMULATED_SM_CLOCK_MHZ
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
