"""Building the region machinery of a node from its config, and recovering
what a previous run of the runtime left behind.

Recovery comes first: a runtime that died while a region was held leaves
tenants frozen (cgroup freeze outlives its writer) and a gate file closed
(its tenants fail open once the heartbeat goes stale, but only then). On
start we thaw every leftover cgroup and reopen every leftover gate before
anything else happens.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krex_runtime.host import cgroups
from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.host.identities import Identity
from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.node import native_build
from krex_runtime.node.config import Config
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.regions.entry.cpu_slices import CpuPlan, plan
from krex_runtime.regions.entry.hints import EntryCheck
from krex_runtime.regions.entry.settle import ClockProbe
from krex_runtime.regions.freezer import Freezer, freezer_for
from krex_runtime.regions.gate import driver_lock
from krex_runtime.regions.gate.backends import DriverLockBackend, GateBackend, PreloadBackend
from krex_runtime.regions.gate.core import Gate, GateError
from krex_runtime.regions.gpu_regions import GpuRegions
from krex_runtime.regions.region_manager import RegionManager
from krex_runtime.regions.region_settings import RegionSettings
from krex_runtime.sim import layout as sim_layout

log = logging.getLogger("krex.regions")

GATES_DIR = "gates"


@dataclass
class RegionMachinery:
    manager: RegionManager
    gates: dict[int, Gate]
    backend: GateBackend
    freezer: Freezer
    cpus: CpuPlan

    def describe(self) -> dict[str, Any]:
        return {
            "gate_backend": self.backend.name,
            "freezer": self.freezer.name,
            "cpu_note": self.cpus.note,
            "reserved_cores": {str(g): list(s.reserved) for g, s in self.cpus.slices.items()},
            "tenant_cores": {str(g): list(s.cores) for g, s in self.cpus.slices.items()},
        }


def gate_path(run_dir: Path, gpu: int) -> Path:
    return run_dir / GATES_DIR / f"gpu{gpu}.gate"


class GateEntries:
    """Each tenant's entries in its GPU's gate (commands/environment.TenantGates):
    a file only its uid and the runtime may write. Tenants that share the
    tenants' user share its group's write access, as they share everything."""

    def __init__(self, gates: dict[int, Gate], tenants_gid: int | None) -> None:
        self._gates = gates
        self._tenants_gid = tenants_gid  # the tenants' user's group, when it is not the runtime's

    def admit(self, gpu: int, tenant_id: int, owner: Identity | None) -> None:
        if owner is not None:
            self._gates[gpu].add_tenant(tenant_id, owner=(owner.uid, owner.gid), mode=0o600)
        elif self._tenants_gid is not None:
            self._gates[gpu].add_tenant(tenant_id, owner=(-1, self._tenants_gid), mode=0o660)
        else:
            self._gates[gpu].add_tenant(tenant_id)

    def dismiss(self, gpu: int, tenant_id: int) -> None:
        self._gates[gpu].remove_tenant(tenant_id)


def recover(run_dir: Path, cgroup_slice: CgroupSlice | None) -> list[str]:
    """Thaw and reopen whatever a previous run left; returns what was done."""
    done = []
    gates_dir = run_dir / GATES_DIR
    if gates_dir.is_dir():
        for path in sorted(gates_dir.glob("*.gate")):
            try:
                with Gate.attach(path) as gate:
                    if gate.is_closed:
                        gate.open_gate()
                        done.append(f"reopened {path.name}")
            except GateError as exc:
                done.append(f"removed unusable {path.name} ({exc})")
            path.unlink(missing_ok=True)
        for path in gates_dir.glob("*.gate.*"):  # the old tenants' entries
            path.unlink(missing_ok=True)
    if cgroup_slice is not None:
        for leftover in cgroup_slice.leftovers():
            cgroups.thaw(leftover)
            done.append(f"thawed {leftover.name}")
    return done


def cpu_plan(config: Config, gpus: list[Gpu]) -> CpuPlan:
    """Each GPU's CPU slice: the cores its tenants run on, and the cores
    reserved for its region holder's measuring thread. Reserved under either
    protection: pinning the holder costs nothing at entry, and under gpu-only
    it is what keeps the other tenants' compiles, which go on running, off the
    measuring thread's cores. `reserved_cores_per_gpu = 0` turns it off."""
    rc = config.regions
    overrides = {int(k): tuple(v) for k, v in rc.cpu_slices.items()}
    return plan(gpus, rc.reserved_cores_per_gpu, overrides)


def build(
    config: Config,
    run_dir: Path,
    gpus: list[Gpu],
    cgroup_slice: CgroupSlice | None,
    cpus: CpuPlan,
    tenants: TenantRegistry,
    sink: EventSink,
    clock_probe: ClockProbe,
) -> RegionMachinery:
    rc = config.regions
    (run_dir / GATES_DIR).mkdir(mode=0o755, exist_ok=True)
    gates = {
        g.index: Gate.create(gate_path(run_dir, g.index), stale_after_s=rc.stale_after_s, drain_timeout_s=rc.drain_timeout_s)
        for g in gpus
    }
    if config.tenants.preload:
        # An entry is believed only from a process that maps an interception library (entry/hints.py).
        vouch = EntryCheck([lib for sanitized in (False, True) for cuda in [native_build.interception_library(sanitized)]
                            for lib in (cuda, native_build.hip_library(cuda))])
        for gate in gates.values():
            gate.vouch = vouch
    backend: GateBackend
    if rc.gate_backend == "driver-lock":
        simulated = gpus and gpus[0].simulated
        if simulated:
            os.environ[sim_layout.ENV_DEVICE] = config.gpus.simulated_device
            os.environ[sim_layout.ENV_GPUS] = str(len(gpus))
        driver = driver_lock.load(native_build.simulated_driver_dir() if simulated else None)
        backend = DriverLockBackend(driver)
    else:
        backend = PreloadBackend()
    freezer: Freezer = freezer_for(cgroup_slice.version if cgroup_slice is not None else None)
    settings = RegionSettings(
        protection=rc.protection,
        hold_limit_s=rc.hold_limit_s,
        on_hold_limit=rc.on_hold_limit,
        quiesce_timeout_s=rc.quiesce_timeout_s,
        drain_timeout_s=rc.drain_timeout_s,
        settle_max_s=rc.settle_max_s,
        settle_poll_s=rc.settle_poll_s,
        gap_s=rc.gap_s,
        share_weights=dict(config.dispatcher.share_weights),
        entry_waits_for=rc.entry_waits_for,
        host_side_wait_s=rc.host_side_wait_s,
    )
    regions = {
        g.index: GpuRegions(g.index, gates[g.index], backend, freezer, cpus, settings, tenants, sink, clock_probe)
        for g in gpus
    }
    return RegionMachinery(RegionManager(regions, tenants), gates, backend, freezer, cpus)
