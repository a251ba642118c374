"""The node's components, built in one place, each given at construction what
it needs (nothing is patched in afterwards).

Order, and why:
  tenant registry    the dispatcher fills it, the region manager reads it:
                     built first, neither needs the other;
  clocks             telemetry's clock reader, which region entry records;
  regions            gates, gate backend, freezer, CPU slices, the manager
                     (policy krex only);
  telemetry          reads the gates, folds canary output;
  tenant setup       the one environment builder, cgroups, cores, user;
  worker pools       context processes, zygotes, context servers, as
                     configured: the node owns them and starts them last;
  dispatcher         handed the pools, told when their workers are ready,
                     and the command leases;
  operator leases    need the dispatcher to stop admission;
  tenancy, channel   identify a region channel peer by the dispatcher's jobs
                     and the pools' word on their own processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krex_runtime.commands import compile_slots
from krex_runtime.commands.build_folders import FOLDER as BUILDS_FOLDER
from krex_runtime.commands.build_folders import BuildFolders
from krex_runtime.commands.dispatcher import Dispatcher
from krex_runtime.commands.environment import RegionAccess, TenantEnvironment, TenantSetup
from krex_runtime.commands.pools import NodePools
from krex_runtime.host.tenant_registry import TenantRegistry
from krex_runtime.node import access, native_build
from krex_runtime.node.config import Config
from krex_runtime.node.gpus import Gpu
from krex_runtime.regions import machinery
from krex_runtime.regions.certificate import Certifier, GpuProcesses
from krex_runtime.regions.channel import RegionChannel
from krex_runtime.regions.hold_watch import HoldBounds, HoldWatch, TenantsCpu
from krex_runtime.regions.leases import CommandLeases, LeaseDesk
from krex_runtime.regions.machinery import RegionMachinery
from krex_runtime.regions.tokens import RegionTokens
from krex_runtime.service.event_log import EventLog
from krex_runtime.service.followers import Attachments, CanaryKeeper, Followers
from krex_runtime.service.host import Host, StartupError
from krex_runtime.service.server import ControlServer
from krex_runtime.service.tenant_identity import Tenancy
from krex_runtime.sim import layout as sim_layout
from krex_runtime.telemetry import gpu_processes, sources
from krex_runtime.telemetry.clocks import Clocks
from krex_runtime.telemetry.monitor import Telemetry
from krex_runtime.wire.protocol import endpoints

REGION_SOCKET = "region.sock"


@dataclass
class Node:
    config: Config
    gpus: list[Gpu]
    dispatcher: Dispatcher
    pools: NodePools
    telemetry: Telemetry
    attachments: Attachments
    tenancy: Tenancy
    canaries: CanaryKeeper | None
    regions: RegionMachinery | None  # policy krex only, as are leases and the channel
    leases: LeaseDesk | None
    channel: RegionChannel | None

    def gpu_record(self, gpu: Gpu) -> dict[str, Any]:
        """A GPU as the trace header, runtime_started, hello and status show it."""
        return gpu_record(self.config, gpu)

    def describe_regions(self) -> dict[str, Any] | None:
        return self.regions.describe() if self.regions is not None else None


def gpu_record(config: Config, gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "memory_total": gpu.memory_total,
        "simulated": gpu.simulated,
        "vendor": gpu.vendor,
        "slots": config.effective_slots_per_gpu,
        "cpus": list(gpu.cpus),
        "pool_size": config.pool.size_per_gpu,
    }


def build(config: Config, gpus: list[Gpu], host: Host, sink: EventLog, server: ControlServer) -> Node:
    krex = config.runtime.policy == "krex"
    tenants = TenantRegistry([g.index for g in gpus])
    clocks = Clocks(sources.open_sampler(gpus, config.gpus.simulated_device), config.telemetry.clock_tolerance)
    regions: RegionMachinery | None = None
    region_access: RegionAccess | None = None
    tokens = RegionTokens()
    if krex:
        cpus = machinery.cpu_plan(config, gpus)
        regions = machinery.build(config, host.run_dir, gpus, host.cgroup_slice, cpus, tenants, sink, clocks.now)
        gates = {g.index: machinery.gate_path(host.run_dir, g.index) for g in gpus}
        region_access = RegionAccess(gates, host.run_dir / REGION_SOCKET, tokens)
    telemetry = Telemetry(config, gpus, sink, regions.gates if regions is not None else {}, clocks)
    tenants_gid = host.tenant_user.gid if host.tenant_user is not None else None
    cores = {g.index: regions.cpus.tenant_cores(g.index) for g in gpus} if regions is not None else {}
    slots, builds = compile_places(config, host, cores)
    setup = TenantSetup(
        env=tenant_environment(config, gpus, host, region_access, slots),
        cgroups=host.cgroup_slice,
        cores=cores,
        run_as=host.run_as,
        gates=machinery.GateEntries(regions.gates, tenants_gid) if regions is not None else None,
        identities=host.identities,
        server_run_as=host.server_run_as,
        builds=builds,
    )
    attachments = Attachments(server, sink.state)  # results carry the regions the state folded
    canaries = CanaryKeeper(telemetry, gpus) if config.telemetry.canary else None
    pools = NodePools(config, gpus, sink, setup, host.run_dir / "pool")
    dispatcher = Dispatcher(
        config,
        gpus,
        sink,
        setup,
        tenants,
        Followers(attachments, canaries),
        host.output_dir,
        pools,
        leases=CommandLeases(regions.manager) if regions is not None else None,
        certificates=regions.manager if regions is not None else None,
    )
    tenancy = Tenancy(dispatcher, pools, host.cgroup_slice, host.tenant_user)
    witnesses = sources.open_processes(gpus, config.gpus.simulated_device)  # who uses each GPU
    leases = channel = None
    if regions is not None and region_access is not None:
        leases = LeaseDesk(regions.manager, dispatcher, config.regions.lease_ttl_s)
        channel = RegionChannel(region_access.socket, regions.manager, tenancy.identify, config.regions, tokens)
        certify_regions(regions, witnesses, tenancy, clocks, hold_bounds(config), host.cgroup_slice,
                        config.regions.hold_sample_s)
    telemetry.foreign_processes = gpu_processes.foreign(witnesses, lambda pid: _is_tenant(tenancy, pid))
    telemetry.process_memory = gpu_processes.process_memory(witnesses, lambda pid: _is_tenant(tenancy, pid))
    return Node(config, gpus, dispatcher, pools, telemetry, attachments, tenancy, canaries, regions, leases, channel)


def certify_regions(regions: RegionMachinery, witnesses: GpuProcesses, tenancy: Tenancy, clocks: Clocks,
                    bounds: HoldBounds, tenants_cpu: TenantsCpu | None = None, sample_s: float = 0.0) -> None:
    """Every GPU's regions get their certificate (regions/certificate.py, hold_watch.py)."""

    def tenant_of(pid: int) -> int | None:
        try:
            who = tenancy.identify(pid)
        except OSError:  # /proc of a process on its way out
            return None
        return who.tenant_id if who is not None else None

    regions.manager.attach_certifiers(
        lambda index, gate: Certifier(index, gate, witnesses, tenant_of, lambda pid: _is_tenant(tenancy, pid), clocks.now,
                                      changes_tenant=tenancy.acts_for_commands,
                                      hold=HoldWatch(index, clocks, clocks.top, bounds, tenants_cpu),
                                      sample_s=sample_s)
    )


def hold_bounds(config: Config) -> HoldBounds:
    """When what the hold's readings found makes a region `perturbed` (regions/hold_watch.py)."""
    rc = config.regions
    return HoldBounds(cpu_wait_share=rc.perturbed_cpu_wait_share, cpu_wait_min_ms=rc.perturbed_cpu_wait_min_ms,
                      clock_tolerance=config.telemetry.clock_tolerance)


def _is_tenant(tenancy: Tenancy, pid: int) -> bool:
    try:
        return bool(tenancy.tenancy_of(pid))
    except OSError:
        return True  # cannot tell: not called foreign


def compile_places(config: Config, host: Host, cores: dict[int, tuple[int, ...]]) -> tuple[Path, BuildFolders]:
    """The node's compile slots (commands/compile_slots.py) and each tenant's
    compile caches (commands/build_folders.py: whose entries in them may be
    handed to the next command, the uids tenants run as)."""
    root = Path(config.eval.build_dir) if config.eval.build_dir else host.run_dir / BUILDS_FOLDER
    user = host.tenant_user
    uids = range(user.uids[0], sum(user.uids)) if user is not None and user.uids else range(0)
    try:
        slots = compile_slots.make_slots(host.run_dir, config.eval.compiles_for(compile_slots.tenant_core_count(cores)))
        ec = config.eval
        return slots, BuildFolders(root, uids, ec.compile_jobs, ec.fresh_builds, ec.command_build_env)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise StartupError(f"cannot make the compile slots or build folders: {where}{exc.strerror or exc}") from None


def tenant_environment(config: Config, gpus: list[Gpu], host: Host, regions: RegionAccess | None,
                       slots: Path | None = None) -> TenantEnvironment:
    simulator: dict[str, str] = {}
    if gpus and gpus[0].simulated:
        simulator = {sim_layout.ENV_DEVICE: config.gpus.simulated_device, sim_layout.ENV_GPUS: str(len(gpus))}
        if config.gpus.simulated_log:
            simulator[sim_layout.ENV_LOG] = config.gpus.simulated_log
        if config.gpus.simulated_heat:  # whichever tenant lays the device out, or attaches later, turns the model on
            simulator[sim_layout.ENV_HEAT] = "1"
    return TenantEnvironment(
        extra=dict(config.tenants.env),
        # Tenants may only read: they are pointed at the read-only socket.
        endpoint=endpoints.control_read_only(host.run_dir),
        run_dir=host.run_dir,
        user_env=access.tenants_env(host.tenant_user),
        library=host.library if config.tenants.preload else None,
        regions=regions,
        simulator=simulator,
        simulator_dir=native_build.simulated_driver_dir() if simulator else None,
        compile_slots=slots,
    )


def open_regions_to_tenants(node: Node, host: Host) -> None:
    """The gates (and, once the channel listens, its socket) are for tenants,
    who may run as another user."""
    if node.regions is None:
        return
    access.open_to_tenants(host.run_dir / machinery.GATES_DIR, host.tenant_user, 0o710)
    for gpu in node.regions.gates:  # the header: tenants only read it
        access.open_to_tenants(machinery.gate_path(host.run_dir, gpu), host.tenant_user, 0o640)


def close_regions(node: Node, host: Host) -> None:
    """Reopen and remove every gate: nothing stays gated after the runtime."""
    if node.regions is None:
        return
    for gpu, gate in node.regions.gates.items():
        gate.open_gate()
        gate.detach(remove_tenants=True)
        machinery.gate_path(host.run_dir, gpu).unlink(missing_ok=True)
