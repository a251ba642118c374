"""Who uses a GPU, as the GPU itself tells: the witnesses of a region's
exclusivity certificate (regions/certificate.py) besides the gate.

- `running(gpu)`: the processes with work on the GPU and how much they have
  done so far. Real GPUs: NVML's running compute processes (work counts are
  unknown there: None); simulated GPUs: the simulated device's process slots
  of processes that executed work on it, with their items started.
- `utilisation(gpu, since_mono_ns)`: per-process SM utilisation samples
  since then (NVML's nvmlDeviceGetProcessUtilization), pid -> highest SM %;
  None where there are none to read: a simulated GPU has no samples, and an
  NVML that does not support them says so.

A read that fails is None ("n/a"), never an exception.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from krex_runtime.node.gpus import Gpu


SAMPLE_PERIOD_US = 200_000  # longer than NVML's per-process sampling period


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    work_items: int | None  # items started so far (None: the GPU does not say)
    active: bool  # work executing now


class SimulatedProcesses:
    def __init__(self, device_name: str) -> None:
        self.device_name = device_name

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        from krex_runtime.sim.device_file import read_device

        try:
            state = read_device(self.device_name)
        except FileNotFoundError:
            return {}  # nobody opened the simulated device yet: nobody uses it
        except Exception:
            return None
        return {
            s.pid: GpuProcess(s.pid, s.work_items, bool(s.active[gpu]))
            for s in state.slots
            if s.alive and (s.devices_used >> gpu) & 1
        }

    def utilisation(self, gpu: int, since_mono_ns: int) -> dict[int, int] | None:
        return None


class NvmlProcesses:
    def __init__(self, gpus: list[Gpu]) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = {g.index: pynvml.nvmlDeviceGetHandleByIndex(g.index) for g in gpus}

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handles[gpu])
        except Exception:
            return None
        return {int(p.pid): GpuProcess(int(p.pid), None, True) for p in procs}

    def utilisation(self, gpu: int, since_mono_ns: int) -> dict[int, int] | None:
        # NVML stamps samples in wall-clock microseconds; a sample covers the
        # sampling period before its stamp, so one stamped just after the grant
        # may still show the work drained before it: only later ones count.
        since_us = int((time.time() - (time.monotonic_ns() - since_mono_ns) / 1e9) * 1e6) + SAMPLE_PERIOD_US
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(self.handles[gpu], since_us)
        except self.nvml.NVMLError as exc:
            if "Not Found" in str(exc):  # no sample since then: nobody ran
                return {}
            return None
        except Exception:
            return None
        out: dict[int, int] = {}
        for s in samples:
            if int(s.timeStamp) >= since_us:
                out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
        return out


class NoProcesses:
    """NVML could not be opened: both witnesses n/a."""

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        return None

    def utilisation(self, gpu: int, since_mono_ns: int) -> dict[int, int] | None:
        return None


def foreign(processes: Any, is_tenant: Callable[[int], bool]) -> Callable[[int], list[int] | None]:
    """GPU index -> the pids using it that this runtime did not start (None: n/a)."""

    def of_gpu(gpu: int) -> list[int] | None:
        running = processes.running(gpu)
        if running is None:
            return None
        return sorted(pid for pid in running if pid != os.getpid() and not is_tenant(pid))

    return of_gpu


def open_processes(gpus: list[Gpu], simulated_device: str) -> Any:
    if gpus and gpus[0].simulated:
        return SimulatedProcesses(simulated_device)
    try:
        return NvmlProcesses(gpus)
    except Exception:
        return NoProcesses()
