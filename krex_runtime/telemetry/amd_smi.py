"""Metrics and processes of real AMD GPUs, through the `amdsmi` Python package
(AMD's bindings of libamd_smi), in the records the NVML path gives
(telemetry/gpu_metrics.py, telemetry/gpu_processes.py), so the clock witness,
the settle step, the certificate and the console treat both vendors alike.

What AMD SMI answers, and what KREX makes of it (AMD SMI's Python API:
docs/how-to/using-amdsmi-for-python.md and py-interface/amdsmi_interface.py
of github.com/ROCm/amdsmi; units as the `amd-smi` command prints them,
amdsmi_cli/amdsmi_commands.py there):

- SM clock: `amdsmi_get_clock_info(h, AmdSmiClkType.GFX)["clk"]` (MHz;
  "cur_clk" in ROCm 5 releases); the top clock a measurement is
  judged against is its `max_clk` (AMD has no application clock);
  `clk_deep_sleep` set means the GPU is idle (NVML's "GPU idle").
- throttle: `amdsmi_get_violation_status(h)`'s `active_*` violations (ROCm
  6.3+, MI300 and later), named `ppt_power`, `socket_thermal`,
  `prochot_thermal`, `vr_thermal`, `hbm_thermal`; else
  `amdsmi_get_gpu_metrics_info(h)["throttle_status"]` (a bool, no reason:
  `smu_throttle`). All are power or thermal states (regions/entry/settle.py).
- power: `amdsmi_get_power_info(h)` `current_socket_power`, else
  `average_socket_power` (W; "N/A" where the GPU does not say).
- temperature: `amdsmi_get_temp_metric(h, HOTSPOT, CURRENT)` (junction;
  EDGE where there is no hotspot sensor), degrees C.
- utilisation: `amdsmi_get_gpu_activity(h)["gfx_activity"]` (%); memory:
  `amdsmi_get_gpu_vram_usage(h)` (MB); processes:
  `amdsmi_get_gpu_process_list(h)` (a list of dicts: pid,
  memory_usage.vram_mem in bytes; a release that lists process handles
  instead gives n/a).

Each GPU is found by its UUID among AMD SMI's processor handles (as
discovery named it, node/amd_gpus.py); a GPU AMD SMI does not list, and
every value it cannot give ("N/A", an exception), is None. Never run on an
AMD GPU: proven against a double of the package that follows the documented
API (tests/fakes/amdsmi).
"""

from __future__ import annotations

import threading
from typing import Any

from krex_runtime.node.gpus import Gpu
from krex_runtime.telemetry.gpu_metrics import _read, injected_faults
from krex_runtime.telemetry.gpu_processes import GpuActivity, GpuProcess, alive_only

# amdsmi_violation_status_t's active flags (amdsmi.h) -> the throttle reason KREX names.
VIOLATIONS = {
    "active_ppt_pwr": "ppt_power",  # package power tracking: the power cap
    "active_socket_thrm": "socket_thermal",
    "active_prochot_thrm": "prochot_thermal",
    "active_vr_thrm": "vr_thermal",
    "active_hbm_thrm": "hbm_thermal",
}
SMU_THROTTLE = "smu_throttle"  # gpu_metrics' throttle_status: throttled, reason not given


_lock = threading.Lock()
_openings = 0  # AmdSmi objects open in this process


class AmdSmi:
    """An opening of AMD SMI and the processor handle of each GPU served,
    matched by UUID. libamd_smi's init is process-wide and not counted (a
    second amdsmi_init does nothing, the first amdsmi_shut_down ends every
    handle: src/amd_smi/amd_smi.cc), so the sampler and the process witness
    share it and the last one closed shuts it down."""

    def __init__(self, gpus: list[Gpu]) -> None:
        global _openings
        import amdsmi

        self.amdsmi = amdsmi
        with _lock:
            if _openings == 0:
                amdsmi.amdsmi_init()
            _openings += 1
        self._open = True
        try:
            by_uuid = {}
            for h in amdsmi.amdsmi_get_processor_handles():
                try:
                    by_uuid[str(amdsmi.amdsmi_get_gpu_device_uuid(h))] = h
                except amdsmi.AmdSmiException:  # a GPU that cannot say who it is cannot be matched
                    pass
        except Exception:
            self.close()
            raise
        self.handles = {g.index: by_uuid.get(g.uuid) for g in gpus}

    def handle(self, gpu: int) -> Any:
        h = self.handles.get(gpu)
        if h is None:
            raise LookupError(f"AMD SMI lists no GPU with the UUID of GPU {gpu}")
        return h

    def close(self) -> None:
        global _openings
        with _lock:
            if not self._open:
                return
            self._open = False
            _openings -= 1
            if _openings == 0:
                try:
                    self.amdsmi.amdsmi_shut_down()
                except Exception:
                    pass


def _number(value: Any) -> float | None:
    """AMD SMI says "N/A" for a value the GPU does not give."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class AmdSmiSampler:
    def __init__(self, gpus: list[Gpu]) -> None:
        self.smi = AmdSmi(gpus)
        self.amdsmi = self.smi.amdsmi

    def sample(self, gpu: int) -> dict[str, Any]:
        a, h, faults = self.amdsmi, self.smi.handle(gpu), injected_faults()
        vram = _read("mem_used", faults, lambda: a.amdsmi_get_gpu_vram_usage(h)) or {}
        total = None if "mem_total" in faults else _number(vram.get("vram_total"))
        used = _number(vram.get("vram_used"))
        return {
            "util_pct": _read("util_pct", faults, lambda: _number(a.amdsmi_get_gpu_activity(h)["gfx_activity"])),
            "mem_used": int(used) << 20 if used is not None else None,  # MB
            "mem_total": int(total) << 20 if total is not None else None,
            "sm_clock_mhz": _read("sm_clock_mhz", faults, lambda: self._clock(h, a.AmdSmiClkType.GFX)),
            "mem_clock_mhz": _read("mem_clock_mhz", faults, lambda: self._clock(h, a.AmdSmiClkType.MEM)),
            "temp_c": _read("temp_c", faults, lambda: self._temperature(h)),
            "power_w": _read("power_w", faults, lambda: self._power(h)),
            "throttle": _read("throttle", faults, lambda: self._throttle(h)),
            "processes": _read("processes", faults, lambda: len(a.amdsmi_get_gpu_process_list(h))),
            "simulated": False,
        }

    def clock_sample(self, gpu: int) -> dict[str, Any]:
        a, h, faults = self.amdsmi, self.smi.handle(gpu), injected_faults()
        gfx = _read("sm_clock_mhz", faults, lambda: a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX)) or {}
        return {
            "sm_clock_mhz": _number(gfx.get("clk", gfx.get("cur_clk"))),
            "throttle": _read("throttle", faults, lambda: self._throttle(h)),
            "idle": bool(gfx["clk_deep_sleep"]) if _number(gfx.get("clk_deep_sleep")) is not None else None,
            "power_w": _read("power_w", faults, lambda: self._power(h)),
            "temp_c": _read("temp_c", faults, lambda: self._temperature(h)),
        }

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None:
        """n/a: AMD SMI keeps no sample buffer of the clock to read at a release."""
        return None

    def top_clock(self, gpu: int) -> float | None:
        """The GFX clock's highest (AMD has no application clock to prefer)."""
        a, h = self.amdsmi, self.smi.handle(gpu)
        return _read("sm_clock_mhz", set(), lambda: _number(a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX)["max_clk"]))

    def _clock(self, h: Any, kind: Any) -> float | None:
        info = self.amdsmi.amdsmi_get_clock_info(h, kind)
        return _number(info.get("clk", info.get("cur_clk")))

    def _power(self, h: Any) -> float | None:
        info = self.amdsmi.amdsmi_get_power_info(h)
        current = _number(info.get("current_socket_power"))
        return current if current else _number(info.get("average_socket_power"))

    def _temperature(self, h: Any) -> float | None:
        a = self.amdsmi
        for sensor in (a.AmdSmiTemperatureType.HOTSPOT, a.AmdSmiTemperatureType.EDGE):
            try:
                value = _number(a.amdsmi_get_temp_metric(h, sensor, a.AmdSmiTemperatureMetric.CURRENT))
            except a.AmdSmiException:  # no such sensor on this GPU
                continue
            if value:
                return value
        return None

    def _throttle(self, h: Any) -> list[str] | None:
        """The power and thermal limits active now; None: the GPU does not say."""
        a = self.amdsmi
        try:
            status = a.amdsmi_get_violation_status(h)
        except (a.AmdSmiException, AttributeError):  # not this GPU, or a release before ROCm 6.3
            status = {}
        known = {name: status[key] for key, name in VIOLATIONS.items() if isinstance(status.get(key), bool)}
        if known:
            return [name for name, active in known.items() if active]
        throttled = a.amdsmi_get_gpu_metrics_info(h).get("throttle_status")
        return ([SMU_THROTTLE] if throttled else []) if isinstance(throttled, bool) else None

    def close(self) -> None:
        self.smi.close()


class AmdSmiProcesses:
    """The processes with the GPU open, as AMD SMI lists them (work counts unknown: None)."""

    def __init__(self, gpus: list[Gpu]) -> None:
        self.smi = AmdSmi(gpus)
        self.amdsmi = self.smi.amdsmi

    def _list(self, gpu: int) -> list[dict[str, Any]] | None:
        try:
            procs = list(self.amdsmi.amdsmi_get_gpu_process_list(self.smi.handle(gpu)))
        except Exception:
            return None
        return procs if all(isinstance(p, dict) and isinstance(p.get("pid"), int) for p in procs) else None

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        procs = self._list(gpu)
        if procs is None:
            return None
        return {int(p["pid"]): GpuProcess(int(p["pid"]), None, True) for p in procs}

    def memory(self, gpu: int) -> dict[int, int | None] | None:
        procs = self._list(gpu)
        if procs is None:
            return None
        return {int(p["pid"]): _vram(p) for p in procs}

    def activity(self, gpu: int, since_us: int = 0) -> GpuActivity | None:
        """AMD SMI keeps nothing of ended processes: the running ones."""
        return alive_only(self.running(gpu))

    def contexts(self, gpu: int) -> set[int] | None:
        running = self.running(gpu)
        return None if running is None else set(running)


def _vram(process: dict[str, Any]) -> int | None:
    used = _number((process.get("memory_usage") or {}).get("vram_mem"))
    return int(used) if used is not None else None

