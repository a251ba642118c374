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

- `contexts(gpu)`: the pids that hold a context on the GPU now (NVML's
  running compute processes; a simulated GPU's live process slots): a
  tenant's claim of a GPU call in flight is believed only from one of them
  (regions/entry/hints.py).

- `activity(gpu, since_us)`: every process the GPU can say used it, those
  that have ended too, as far as it keeps them: what a region's certificate
  compares its grant with at its release, so that a process that ran inside
  the region and ended before the release is still seen. Simulated GPUs:
  every slot that ran work there, alive or dead, and the slots the driver
  reaped (their records; sim/device_file.py); NVML: the running compute
  processes, the processes accounting mode recorded since `since_us` (wall
  clock, microseconds) where it is on, and the pids of the per-process
  utilisation samples since then (a process present only as a sample had a
  context during that time; a sample's figure is no evidence of work, see
  regions/certificate.py).

NVML's per-process utilisation samples are not read: they lag a process's
work by seconds (regions/certificate.py says why that rules them out).

A read that fails is None ("n/a"), never an exception.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from krex_runtime.node.gpus import Gpu


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    work_items: int | None  # items started so far (None: the GPU does not say)
    active: bool  # work executing now
    alive: bool = True  # False: it has ended (activity() keeps what the GPU recorded of it)
    start_time: int = 0  # its start time (/proc/<pid>/stat field 22) where the GPU keeps it; 0: not known


@dataclass(frozen=True)
class GpuActivity:
    """Who used a GPU, ended processes included (`activity`)."""

    processes: tuple[GpuProcess, ...]
    # Simulated GPUs: slots the driver has reaped so far, and how many of
    # their records it still keeps (the rest were overwritten: their work is
    # not seen). None: the GPU keeps no such count.
    reaped_seq: int | None = None
    reaped_kept: int = 0


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

    def contexts(self, gpu: int) -> set[int] | None:
        """Processes that can submit work to the GPU now: every live slot (the
        simulated driver claims one at cuInit; a slot serves every device)."""
        from krex_runtime.sim.device_file import read_device

        try:
            state = read_device(self.device_name)
        except FileNotFoundError:
            return set()
        except Exception:
            return None
        return {s.pid for s in state.slots if s.alive}

    def activity(self, gpu: int, since_us: int = 0) -> GpuActivity | None:
        from krex_runtime.sim.device_file import read_device
        from krex_runtime.sim.layout import REAPED_MAX

        try:
            state = read_device(self.device_name)
        except FileNotFoundError:
            return GpuActivity(())
        except Exception:
            return None
        found = [GpuProcess(s.pid, s.work_items[gpu], bool(s.active[gpu]) and s.alive, s.alive, s.start_time)
                 for s in state.slots if (s.devices_used >> gpu) & 1]
        found += [GpuProcess(r.pid, r.work_items[gpu], False, False, r.start_time)
                  for r in state.reaped if (r.devices_used >> gpu) & 1]
        return GpuActivity(tuple(found), state.reaped_seq, min(state.reaped_seq, REAPED_MAX))


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

    def contexts(self, gpu: int) -> set[int] | None:
        """Processes with a context on the GPU: its running compute processes."""
        running = self.running(gpu)
        return None if running is None else set(running)

    def activity(self, gpu: int, since_us: int = 0) -> GpuActivity | None:
        running = self.running(gpu)
        if running is None:
            return None
        found = {pid: p for pid, p in running.items()}
        for pid in self._accounted(gpu, since_us) | self._sampled(gpu, since_us):
            found.setdefault(pid, GpuProcess(pid, None, False, False))
        return GpuActivity(tuple(found.values()))

    def _accounted(self, gpu: int, since_us: int) -> set[int]:
        """Processes accounting mode recorded that started or ran since `since_us` (empty where it is off)."""
        nvml, handle = self.nvml, self.handles[gpu]
        try:
            if nvml.nvmlDeviceGetAccountingMode(handle) != nvml.NVML_FEATURE_ENABLED:
                return set()
            pids = nvml.nvmlDeviceGetAccountingPids(handle)
        except Exception:
            return set()
        found = set()
        for pid in pids:
            try:
                stats = nvml.nvmlDeviceGetAccountingStats(handle, pid)
            except Exception:
                continue
            # startTime: us since the epoch; time: ms it has run (so far, or in all once ended).
            if stats.isRunning or stats.startTime + stats.time * 1000 >= since_us:
                found.add(int(pid))
        return found

    def _sampled(self, gpu: int, since_us: int) -> set[int]:
        """Pids of the per-process utilisation samples since `since_us`: each had a context then."""
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(self.handles[gpu], since_us)
        except Exception:
            return set()
        return {int(s.pid) for s in samples if s.timeStamp >= since_us}


def _used(process: Any) -> int | None:
    used = getattr(process, "usedGpuMemory", None)  # None: not available (e.g. under MPS, on some drivers)
    return int(used) if isinstance(used, int) else None


class NoProcesses:
    """NVML (or AMD SMI) could not be opened: the process witness is n/a."""

    def running(self, gpu: int) -> dict[int, GpuProcess] | None:
        return None

    def memory(self, gpu: int) -> dict[int, int | None] | None:
        return None

    def activity(self, gpu: int, since_us: int = 0) -> GpuActivity | None:
        return None

    def contexts(self, gpu: int) -> set[int] | None:
        return None


def alive_only(running: dict[int, GpuProcess] | None) -> GpuActivity | None:
    """The activity of a GPU that keeps nothing of ended processes: its running ones."""
    return None if running is None else GpuActivity(tuple(running.values()))


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
