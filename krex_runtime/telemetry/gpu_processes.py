"""Who uses a GPU, as the GPU itself tells: the witnesses of a region's
exclusivity certificate (regions/certificate.py) besides the gate.

- `running(gpu)`: the processes with work on the GPU and how much they have
  done so far. Real GPUs: NVML's running compute processes, AMD SMI's
  process list on AMD GPUs (telemetry/amd_smi.py) (work counts are unknown
  there: None); simulated GPUs: the simulated device's process slots
  of processes that executed work on it, with their items started.

- `memory(gpu)`: GPU memory per process, as nvitop shows it: NVML's running
  compute processes' used memory (None where the driver does not say);
  simulated GPUs: each process slot's memory allocated on that device.

NVML's per-process utilisation samples are not read: they lag a process's
work by seconds (regions/certificate.py says why that rules them out).

A read that fails is None ("n/a"), never an exception.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from krex_runtime.node.gpus import Gpu


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
            s.pid: GpuProcess(s.pid, s.work_items[gpu], bool(s.active[gpu]))
            for s in state.slots
            if s.alive and (s.devices_used >> gpu) & 1
        }

    def memory(self, gpu: int) -> dict[int, int | None] | None:
        from krex_runtime.sim.device_file import read_device

        try:
            state = read_device(self.device_name)
        except FileNotFoundError:
            return {}
        except Exception:
            return None
        return {s.pid: int(s.mem_used[gpu]) for s in state.slots if s.alive and s.mem_used[gpu]}


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

    def memory(self, gpu: int) -> dict[int, int | None] | None:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handles[gpu])
        except Exception:
            return None
        return {int(p.pid): _used(p) for p in procs}


def _used(process: Any) -> int | None:
    used = getattr(process, "usedGpuMemory", None)  # None: not available (e.g. under MPS, on some drivers)
    return int(used) if isinstance(used, int) else None


class NoProcesses:
    """NVML (or AMD SMI) could not be opened: the process witness is n/a."""

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        return None

    def memory(self, gpu: int) -> dict[int, int | None] | None:
        return None


def foreign(processes: Any, is_tenant: Callable[[int], bool]) -> Callable[[int], list[int] | None]:
    """GPU index -> the pids using it that this runtime did not start (None: n/a)."""

    def of_gpu(gpu: int) -> list[int] | None:
        running = processes.running(gpu)
        if running is None:
            return None
        return sorted(pid for pid in running if pid != os.getpid() and not is_tenant(pid))

    return of_gpu


def process_memory(processes: Any, is_tenant: Callable[[int], bool]) -> Callable[[int], list[dict[str, Any]] | None]:
    """GPU index -> its processes' GPU memory, most first: {pid, mem_used
    (bytes; None: n/a), foreign (not started by this runtime)} (None: n/a)."""

    def of_gpu(gpu: int) -> list[dict[str, Any]] | None:
        memory = processes.memory(gpu)
        if memory is None:
            return None
        ordered = sorted(memory.items(), key=lambda item: -(item[1] or 0))
        return [{"pid": pid, "mem_used": used, "foreign": pid != os.getpid() and not is_tenant(pid)}
                for pid, used in ordered]

    return of_gpu
