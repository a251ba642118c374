"""CPU slices: per GPU, the cores its tenants use and the cores reserved for
the thread that holds its region.

Each GPU's slice comes from NVML's affinity (or config); from it, `reserved_per_gpu`
cores are set aside, distinct across GPUs. Every tenant runs on its slice minus
every GPU's reserved cores, so while a measuring thread is pinned to its
reserved cores nothing else of ours runs there. When there are too few cores to
reserve any and still leave tenants one, nothing is reserved and the runtime
says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from krex_runtime.node.gpus import Gpu


@dataclass(frozen=True)
class CpuSlice:
    gpu: int
    cores: tuple[int, ...]  # what this GPU's tenants may use
    reserved: tuple[int, ...]  # for this GPU's region holder only


@dataclass(frozen=True)
class CpuPlan:
    slices: dict[int, CpuSlice]
    note: str  # why nothing was reserved, or ""

    def tenant_cores(self, gpu: int) -> tuple[int, ...]:
        return self.slices[gpu].cores

    def reserved_cores(self, gpu: int) -> tuple[int, ...]:
        return self.slices[gpu].reserved


def plan(gpus: list[Gpu], reserved_per_gpu: int, overrides: dict[int, tuple[int, ...]]) -> CpuPlan:
    allowed = set(os.sched_getaffinity(0))
    base = {g.index: tuple(sorted(set(overrides.get(g.index, g.cpus)) & allowed)) or tuple(sorted(allowed)) for g in gpus}
    reserved: dict[int, tuple[int, ...]] = {g: () for g in base}
    taken: set[int] = set()
    note = ""
    if reserved_per_gpu > 0:
        for gpu in sorted(base):
            # Take from the top of the slice: low cores tend to carry interrupts.
            free = [c for c in sorted(base[gpu], reverse=True) if c not in taken]
            pick = tuple(sorted(free[:reserved_per_gpu]))
            reserved[gpu] = pick
            taken.update(pick)
        if any(len(reserved[g]) < reserved_per_gpu for g in base) or any(
            not (set(base[g]) - taken) for g in base
        ):
            note = (
                f"too few cores ({len(allowed)}) to reserve {reserved_per_gpu} per GPU for "
                f"{len(base)} GPU(s) and keep one for tenants: no cores reserved"
            )
            reserved = {g: () for g in base}
            taken = set()
    slices = {
        g: CpuSlice(gpu=g, cores=tuple(c for c in base[g] if c not in taken), reserved=reserved[g]) for g in base
    }
    return CpuPlan(slices=slices, note=note)


def is_thread_of(pid: int, tid: int) -> bool:
    """Whether `tid` is a thread of process `pid` now."""
    return os.path.exists(f"/proc/{pid}/task/{tid}")


def pin_thread(pid: int, tid: int, cores: tuple[int, ...]) -> bool:
    """Pin one thread of process `pid` (by its Linux tid) to `cores`; False if it
    is gone. A tid a tenant names is checked to be its own: it could be anyone's."""
    if not cores:
        return True
    if not is_thread_of(pid, tid):
        return False
    try:
        os.sched_setaffinity(tid, cores)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return True
