"""CPU slices: per GPU, the cores its tenants use and the cores reserved for
the thread that holds its region.

Each GPU's slice comes from NVML's affinity (or config); from it, `reserved_per_gpu`
cores are set aside, distinct across GPUs. Every tenant runs on its slice minus
every GPU's reserved cores, so while a measuring thread is pinned to its
reserved cores nothing else of ours runs there. A reserved core's SMT siblings
(the other hardware threads of its physical core, from sysfs) are reserved with
it: a tenant's compile on a sibling shares the measuring thread's execution
units and caches, and slows its launches without ever making it wait. When
there are too few cores to reserve any and still leave tenants one, nothing is
reserved and the runtime says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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


SIBLINGS = "/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list"


def smt_siblings(core: int) -> set[int]:
    """The hardware threads sharing `core`'s physical core, itself included
    ({core} where sysfs does not say)."""
    try:
        with open(SIBLINGS.format(core)) as f:
            text = f.read().strip()
    except OSError:
        return {core}
    found: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            found.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        return {core}
    return found | {core}


def plan(gpus: list[Gpu], reserved_per_gpu: int, overrides: dict[int, tuple[int, ...]],
         siblings: Callable[[int], set[int]] = smt_siblings) -> CpuPlan:
    allowed = set(os.sched_getaffinity(0))
    base = {g.index: tuple(sorted(set(overrides.get(g.index, g.cpus)) & allowed)) or tuple(sorted(allowed)) for g in gpus}
    note = ""
    reserved, taken = _reserve(base, reserved_per_gpu, lambda core: siblings(core) & allowed)
    if reserved is None:  # the siblings leave tenants nothing: the cores alone, and say so
        reserved, taken = _reserve(base, reserved_per_gpu, lambda core: {core})
        note = "too few cores to keep the reserved cores' SMT siblings free: tenants run on them" if reserved else ""
    if reserved is None:
        note = (
            f"too few cores ({len(allowed)}) to reserve {reserved_per_gpu} per GPU for "
            f"{len(base)} GPU(s) and keep one for tenants: no cores reserved"
        )
        reserved, taken = {g: () for g in base}, set()
    slices = {
        g: CpuSlice(gpu=g, cores=tuple(c for c in base[g] if c not in taken), reserved=reserved[g]) for g in base
    }
    return CpuPlan(slices=slices, note=note)


def _reserve(base: dict[int, tuple[int, ...]], per_gpu: int, with_core: Callable[[int], set[int]]
             ) -> tuple[dict[int, tuple[int, ...]] | None, set[int]]:
    """Each GPU's reserved cores, and every core kept from tenants (the reserved
    ones and what `with_core` keeps free with each); None where some GPU gets
    fewer than `per_gpu` or its tenants no core."""
    reserved: dict[int, tuple[int, ...]] = {g: () for g in base}
    taken: set[int] = set()
    if per_gpu <= 0:
        return reserved, taken
    for gpu in sorted(base):
        pick: set[int] = set()
        # From the top of the slice: low cores tend to carry interrupts.
        for core in sorted(base[gpu], reverse=True):
            if len(pick) >= per_gpu:
                break
            if core not in taken:
                pick.add(core)
                taken |= with_core(core) | {core}
        reserved[gpu] = tuple(sorted(pick))
    if any(len(reserved[g]) < per_gpu for g in base) or any(not (set(base[g]) - taken) for g in base):
        return None, set()
    return reserved, taken


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
