"""A double of AMD's `amdsmi` Python package, for tests on a machine without
an AMD GPU: a test puts tests/fakes on the runtime's PYTHONPATH and describes
the GPUs in a JSON file named by KREX_FAKE_AMDSMI (read at every call, so a
test moves a clock while the runtime runs).

It follows the real API as documented and implemented in github.com/ROCm/amdsmi
(docs/how-to/using-amdsmi-for-python.md; py-interface/amdsmi_interface.py and
amdsmi_exception.py; include/amd_smi/amdsmi.h for the enum values and units;
src/amd_smi/amd_smi.cc for init and shut-down): the same names, argument
checks (a wrong handle or enum type is AmdSmiParameterException), return
shapes ("N/A" where the GPU does not give a value), exceptions, and a
process-wide init that a second amdsmi_init leaves alone and the first
amdsmi_shut_down ends, handles included. amdsmi_get_gpu_metrics_info returns
only the keys KREX reads, of the many the real one has.

The JSON file: {"gpus": [{"uuid", "market_name", "vram_mb", "numa_node",
"gfx_clk", "gfx_max_clk", "mem_clk", "deep_sleep", "power_w", "hotspot_c",
"edge_c", "gfx_activity", "vram_used_mb", "violations" (a dict of the
active_* flags; absent: AMDSMI_STATUS_NOT_SUPPORTED), "throttle_status",
"processes": [{"pid", "vram"}]}]}; a key left out is a value the GPU does
not give.
"""

from __future__ import annotations

import json
import os
from enum import IntEnum
from typing import Any

# amdsmi.h's amdsmi_status_t values the double raises.
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
NA = "N/A"


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = {
            AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
            AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
            AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
            AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
        }.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self) -> str:
        return self.err_info

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.err_msg = msg or f"Invalid parameter:\nActual type: {type(receivedValue)}\nExpected type: {expectedType}"

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1
    INIT_NON_AMD_CPUS = 1 << 2
    INIT_NON_AMD_GPUS = 1 << 3


class AmdSmiClkType(IntEnum):  # amdsmi_clk_type_t: GFX is SYS
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class AmdSmiTemperatureType(IntEnum):  # amdsmi_temperature_type_t: JUNCTION is HOTSPOT
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6
    EMERGENCY = 7
    EMERGENCY_HYST = 8
    CRIT_MIN = 9
    CRIT_MIN_HYST = 10
    OFFSET = 11
    LOWEST = 12
    HIGHEST = 13


class amdsmi_processor_handle:
    def __init__(self, index: int, generation: int) -> None:
        self.index = index
        self.generation = generation


_initialized = False
_generation = 0  # handles of an earlier init are dangling after shut-down


def amdsmi_init(flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    global _initialized, _generation
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    if _initialized:
        return
    if not os.environ.get("KREX_FAKE_AMDSMI"):
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED)
    _initialized, _generation = True, _generation + 1


def amdsmi_shut_down() -> None:
    global _initialized
    _initialized = False


def _gpus() -> list[dict[str, Any]]:
    if not _initialized:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
    with open(os.environ["KREX_FAKE_AMDSMI"], encoding="utf-8") as f:
        return list(json.load(f)["gpus"])


def _gpu(handle: Any) -> dict[str, Any]:
    if not isinstance(handle, amdsmi_processor_handle):
        raise AmdSmiParameterException(handle, amdsmi_processor_handle)
    gpus = _gpus()
    if handle.generation != _generation or handle.index >= len(gpus):
        raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    return gpus[handle.index]


def _value(gpu: dict[str, Any], key: str) -> Any:
    return gpu[key] if gpu.get(key) is not None else NA


def amdsmi_get_processor_handles() -> list[amdsmi_processor_handle]:
    return [amdsmi_processor_handle(i, _generation) for i in range(len(_gpus()))]


def amdsmi_get_gpu_device_uuid(processor_handle: Any) -> str:
    return str(_gpu(processor_handle)["uuid"])


def amdsmi_get_gpu_asic_info(processor_handle: Any) -> dict[str, Any]:
    gpu = _gpu(processor_handle)
    return {"market_name": gpu.get("market_name", ""), "vendor_id": 0x1002, "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": 0x1002, "device_id": 0x74A1, "rev_id": "0x00", "asic_serial": "", "oam_id": 0,
            "num_compute_units": 304, "target_graphics_version": "gfx942"}


def amdsmi_get_gpu_vram_info(processor_handle: Any) -> dict[str, Any]:
    gpu = _gpu(processor_handle)
    return {"vram_type": 0, "vram_vendor": 0, "vram_size": int(gpu.get("vram_mb", 0)), "vram_bit_width": 8192}


def amdsmi_topo_get_numa_node_number(processor_handle: Any) -> int:
    return int(_gpu(processor_handle).get("numa_node", 0))


def amdsmi_get_clock_info(processor_handle: Any, clock_type: Any) -> dict[str, int]:
    gpu = _gpu(processor_handle)
    if not isinstance(clock_type, AmdSmiClkType):
        raise AmdSmiParameterException(clock_type, AmdSmiClkType)
    if clock_type == AmdSmiClkType.GFX and gpu.get("gfx_clk") is not None:
        return {"clk": int(gpu["gfx_clk"]), "min_clk": 500, "max_clk": int(gpu.get("gfx_max_clk", 0)),
                "clk_locked": 0, "clk_deep_sleep": int(gpu.get("deep_sleep", 0))}
    if clock_type == AmdSmiClkType.MEM and gpu.get("mem_clk") is not None:
        return {"clk": int(gpu["mem_clk"]), "min_clk": 900, "max_clk": int(gpu["mem_clk"]), "clk_locked": 0,
                "clk_deep_sleep": 0}
    raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)


def amdsmi_get_gpu_activity(processor_handle: Any) -> dict[str, Any]:
    gpu = _gpu(processor_handle)
    return {"gfx_activity": _value(gpu, "gfx_activity"), "umc_activity": NA, "mm_activity": NA}


def amdsmi_get_power_info(processor_handle: Any) -> dict[str, Any]:
    gpu = _gpu(processor_handle)  # MI300: current_socket_power; older GPUs: average only
    return {"current_socket_power": _value(gpu, "power_w"), "average_socket_power": _value(gpu, "power_w"),
            "gfx_voltage": NA, "soc_voltage": NA, "mem_voltage": NA, "power_limit": 750}


def amdsmi_get_temp_metric(processor_handle: Any, sensor_type: Any, metric: Any) -> int:
    gpu = _gpu(processor_handle)
    if not isinstance(sensor_type, AmdSmiTemperatureType):
        raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
    if not isinstance(metric, AmdSmiTemperatureMetric):
        raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
    key = {AmdSmiTemperatureType.HOTSPOT: "hotspot_c", AmdSmiTemperatureType.EDGE: "edge_c"}.get(sensor_type)
    if metric != AmdSmiTemperatureMetric.CURRENT or key is None or gpu.get(key) is None:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    return int(gpu[key])


def amdsmi_get_gpu_vram_usage(processor_handle: Any) -> dict[str, Any]:
    gpu = _gpu(processor_handle)
    return {"vram_total": int(gpu.get("vram_mb", 0)), "vram_used": int(gpu.get("vram_used_mb", 0))}


def amdsmi_get_violation_status(processor_handle: Any) -> dict[str, Any]:
    gpu = _gpu(processor_handle)
    if gpu.get("violations") is None:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    active = gpu["violations"]
    out: dict[str, Any] = {"reference_timestamp": 0, "violation_timestamp": 0, "acc_counter": 0}
    for name in ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm"):
        on = active.get(f"active_{name}", NA)
        out |= {f"acc_{name}": 0, f"per_{name}": (100 if on is True else 0) if on != NA else NA, f"active_{name}": on}
    return out


def amdsmi_get_gpu_metrics_info(processor_handle: Any) -> dict[str, Any]:
    gpu = _gpu(processor_handle)
    return {"temperature_edge": _value(gpu, "edge_c"), "temperature_hotspot": _value(gpu, "hotspot_c"),
            "average_gfx_activity": _value(gpu, "gfx_activity"), "average_socket_power": _value(gpu, "power_w"),
            "current_socket_power": _value(gpu, "power_w"), "current_gfxclk": _value(gpu, "gfx_clk"),
            "throttle_status": _value(gpu, "throttle_status"), "indep_throttle_status": NA}


def amdsmi_get_gpu_process_list(processor_handle: Any) -> list[dict[str, Any]]:
    gpu = _gpu(processor_handle)
    return [{"name": "N/A", "pid": int(p["pid"]), "mem": int(p.get("vram", 0)), "engine_usage": {"gfx": 0, "enc": 0},
             "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": int(p.get("vram", 0))}}
            for p in gpu.get("processes", [])]
