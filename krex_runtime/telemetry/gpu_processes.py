"""Who uses a GPU, as the GPU itself tells: the witnesses of a region's
exclusivity certificate (regions/certificate.py) besides the gate.

- `running(gpu)`: the processes with work on the GPU and how much they have
  done so far. Real GPUs: NVML's running compute processes (work counts are
  unknown there: None); simulated GPUs: the simulated device's process slots
  of processes that executed work on it, with their items started.
- `utilisation(gpu, since_mono_ns)`: per-process SM utilisation samples
  that cover only time after then (NVML's nvmlDeviceGetProcessUtilization),
  pid -> (highest SM %, how long after then that sample was stamped, ms);
  None where there are none to read: a simulated GPU has no samples, an NVML
  that does not support them says so, and a window shorter than one sample
  period holds no sample that covers it alone.

A sample covers the sampling period before its stamp, and NVML's period is
the product's (1/6 s to 1 s, per its documentation): one stamped within a
period after the grant may still show work drained before it. The period is
read at start-up from the spacing of the GPU's own utilisation samples; where
that cannot be read, the documented longest period is assumed.

A read that fails is None ("n/a"), never an exception.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from krex_runtime.node.gpus import Gpu


LONGEST_PERIOD_US = 1_000_000  # NVML's documented longest sampling period
MARGIN_US = 20_000  # for the jitter of a period's stamps


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

    def utilisation(self, gpu: int, since_mono_ns: int) -> dict[int, tuple[int, int]] | None:
        return None


class NvmlProcesses:
    def __init__(self, gpus: list[Gpu]) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = {g.index: pynvml.nvmlDeviceGetHandleByIndex(g.index) for g in gpus}
        self.period_us = {i: sample_period_us(pynvml, h) for i, h in self.handles.items()}

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handles[gpu])
        except Exception:
            return None
        return {int(p.pid): GpuProcess(int(p.pid), None, True) for p in procs}

    def utilisation(self, gpu: int, since_mono_ns: int) -> dict[int, tuple[int, int]] | None:
        # NVML stamps samples in wall-clock microseconds.
        grant_us = int((time.time() - (time.monotonic_ns() - since_mono_ns) / 1e9) * 1e6)
        since_us = grant_us + self.period_us[gpu] + MARGIN_US  # only samples that cover the window alone
        if time.time() * 1e6 < since_us:
            return None  # shorter than a period: no sample can speak for the window alone
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(self.handles[gpu], since_us)
        except self.nvml.NVMLError as exc:
            if "Not Found" in str(exc):  # no sample since then: nobody ran
                return {}
            return None
        except Exception:
            return None
        out: dict[int, tuple[int, int]] = {}
        for s in samples:
            pid, util, stamp = int(s.pid), int(s.smUtil), int(s.timeStamp)
            if stamp >= since_us and util >= out.get(pid, (-1, 0))[0]:
                out[pid] = (util, (stamp - grant_us) // 1000)
        return out


def sample_period_us(nvml: Any, handle: Any) -> int:
    """The spacing of the GPU's utilisation samples (their median), else the
    documented longest period."""
    try:
        _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        stamps = sorted({int(s.timeStamp) for s in samples})
    except Exception:
        return LONGEST_PERIOD_US
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]) if b > a)
    if len(gaps) < 3:
        return LONGEST_PERIOD_US
    return min(gaps[len(gaps) // 2], LONGEST_PERIOD_US)


class NoProcesses:
    """NVML could not be opened: both witnesses n/a."""

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        return None

    def utilisation(self, gpu: int, since_mono_ns: int) -> dict[int, tuple[int, int]] | None:
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
