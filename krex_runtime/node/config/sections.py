"""The config's typed sections: one frozen dataclass per TOML table, and Config
that holds them all.

Every field is documented in docs/configuration.md; keep the two in step.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Literal

from krex_runtime.wire.protocol.bodies import Mode

Policy = Literal["command", "ungated", "krex"]
POLICIES: tuple[str, ...] = ("command", "ungated", "krex")


class ConfigError(Exception):
    """A config that cannot be used; the message is one line for the operator."""


@dataclass(frozen=True)
class RuntimeSection:
    run_dir: str = ""
    lock_dir: str = ""
    trace_path: str = ""
    policy: Policy = "krex"
    control_tcp: str = ""
    telemetry_tcp: str = ""
    access_group: str = ""
    read_only_group: str = ""
    curve_server_key: str = ""
    curve_clients: str = ""
    snapshot_interval_s: float = 1.0
    on_shutdown: Literal["cancel", "finish"] = "cancel"
    shutdown_grace_s: float = 10.0
    max_message_bytes: int = 1 << 20
    snapshot_finished: int = 1000
    trace_rotate_bytes: int = 256 << 20
    max_requests_in_flight: int = 1024
    max_requests_per_peer: int = 64
    reply_queue: int = 1000  # messages queued per control connection; past it, dropped and said so
    watchdog: bool = True  # a process outside the tenants that thaws and reopens if the runtime dies
    # What this node offers beyond its GPUs ("zone" = "a", "nvlink" = "yes"):
    # a cluster places commands by them, and submits that need others are refused.
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuSection:
    simulated: int = 0
    # Simulated AMD GPUs (the simulated HIP runtime), numbered after the simulated NVIDIA ones.
    simulated_amd: int = 0
    # Whose real GPUs to discover: NVML's, AMD SMI's, or both ("all").
    vendor: Literal["nvidia", "amd", "all"] = "nvidia"
    simulated_device: str = ""  # "": the run dir's own (resolve_simulated_device)
    simulated_log: str = ""
    # The simulated GPUs heat under sustained load and their SM clock falls with
    # the heat, their kernels running at it (docs/simulator.md, "Heat and the
    # SM clock"): the demo's figures. Off, the clock holds at the top, as the
    # protocol tests want it.
    simulated_heat: bool = False
    visible: tuple[int, ...] = ()


@dataclass(frozen=True)
class DispatcherSection:
    slots_per_gpu: int = 16  # measured: docs/BENCHMARKS.md, "Evaluation"
    max_queued: int = 100_000
    default_timeout_s: float = 3600.0
    kill_grace_s: float = 2.0
    orphan_grace_s: float = 2.0  # after the main process ends, for what it left running
    keep_finished: int = 10_000
    default_mode: Mode = "process"  # for submissions that name no mode
    share_weights: dict[str, float] = field(default_factory=dict)  # share key -> weight (others: 1)


@dataclass(frozen=True)
class TenantSection:
    preload: bool = True
    cgroups: Literal["auto", "v2", "v1", "off"] = "auto"
    output_dir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    allow_root: bool = False
    # [first uid, how many]: each command (each context process, each forked
    # child) runs as a uid of its own from here; () = all run as `user`.
    uid_range: tuple[int, ...] = ()
    group: str = ""  # the group every uid of uid_range is in ("": user's group)


@dataclass(frozen=True)
class RegionSection:
    gate_backend: Literal["preload", "driver-lock"] = "preload"
    protection: Literal["gpu+cpu", "gpu-only"] = "gpu-only"
    hold_limit_s: float = 60.0
    on_hold_limit: Literal["revoke", "kill"] = "revoke"
    quiesce_timeout_s: float = 5.0
    # "perturbing": entry does not wait for threads inside context creation or
    # module loading (regions/entry/quiesce.py); "all": it waits for every gated call.
    entry_waits_for: Literal["perturbing", "all"] = "perturbing"
    drain_timeout_s: float = 10.0
    # At entry, wait up to this long while the GPU shows a power or thermal
    # state the drained tenants left, or a clock below its top (regions/entry/settle.py);
    # a GPU granted in a settled state waits nothing. 0 = never wait.
    settle_max_s: float = 0.5
    settle_poll_s: float = 0.001  # how often that wait reads the clock
    settle_cap_s: float = 1.0  # the most a region may ask to settle (region(settle_s=...)); 0 = none may
    gap_s: float = 0.02  # the gate's open time after a release that held tenants back (regions/gap.py)
    # A region whose measuring thread waited on a run queue for more than this
    # share of its hold (and at least the minimum) is `perturbed` (regions/hold_watch.py).
    perturbed_cpu_wait_share: float = 0.25
    perturbed_cpu_wait_min_ms: float = 5.0
    # Before the gate closes, other tenants' context creations and module loads
    # in progress are let finish, new ones parked, this long at most (gpu_regions.py).
    host_side_wait_s: float = 2.0
    # While a region is held, the GPU's processes are read this often, so that
    # its certificate sees, and knows whose, every process that used the GPU
    # during the hold, not only those alive at its end (regions/entry/hold_processes.py).
    # 0 = read at the grant and the release only.
    hold_sample_s: float = 0.05
    heartbeat_interval_s: float = 0.5
    stale_after_s: float = 3.0
    reserved_cores_per_gpu: int = 1
    cpu_slices: dict[str, list[int]] = field(default_factory=dict)
    lease_ttl_s: float = 3600.0
    channel_hello_timeout_s: float = 5.0
    channel_max_messages_per_s: int = 1000
    channel_max_connections: int = 256
    channel_max_connections_per_uid: int = 128
    channel_max_connections_per_tenant: int = 8
    channel_idle_timeout_s: float = 60.0
    auto_region: bool = False  # commands' timing harnesses run in regions unless a submit says otherwise
    auto_region_entries: tuple[str, ...] = ()  # more entry points: "module:function", "module:Class.method"


@dataclass(frozen=True)
class TelemetrySection:
    sample_interval_s: float = 1.0
    # The canary is a load of its own: it perturbed other tenants' measurements
    # (docs/BENCHMARKS.md), so it runs only when asked; the regions' own records
    # give the inflation estimate without it.
    canary: bool = False
    canary_period_s: float = 10.0
    canary_outside: bool = True
    canary_target_ms: float = 1.0
    canary_window: int = 30
    clock_tolerance: float = 0.10
    prometheus_listen: str = ""  # "HOST:PORT" serves /metrics there; "" = no exporter
    prometheus_max_connections: int = 16  # open at once; past it none is accepted until one ends


@dataclass(frozen=True)
class PoolSection:
    size_per_gpu: int = 0
    preload: tuple[str, ...] = ()
    context: Literal["auto", "driver", "torch", "none"] = "auto"
    max_commands: int = 100
    health_check: bool = True
    start_timeout_s: float = 120.0
    clean_timeout_s: float = 120.0
    zygote: bool = False  # a zygote per GPU importing `preload`, for forked mode


@dataclass(frozen=True)
class ForwardSection:
    """Forwarded mode (docs/modes.md): context servers that execute native
    commands' driver calls in a live context."""

    servers_per_gpu: int = 0  # 0: forwarded mode off
    native_default: bool = False  # submissions naming no mode that are not Python entry points run forwarded
    # A call forwarded mode does not serve: "process" runs the command again in
    # process mode (only before its first region); "fail" is strict forwarding,
    # where the call fails as not supported.
    fallback: Literal["fail", "process"] = "process"
    ring_kib: int = 1024  # each command's request ring (a power of two)
    staging_kib: int = 1024  # each command's reply staging area (copies to the host, in chunks of it)
    pinned_mib: int = 1024  # each command's pinned arena: its page-locked allocations (0: none, all staged)
    max_commands: int = 1000  # a server is replaced after this many commands
    # Who the context servers run as: "" the runtime's own user, else an account
    # or a bare uid, never one a tenant can be given (node/access.server_run_as).
    server_user: str = ""
    start_timeout_s: float = 60.0
    clean_timeout_s: float = 30.0


@dataclass(frozen=True)
class EvalSection:
    """Evaluations (`krex eval`): what the node gives the compiles of the
    candidates it runs (docs/configuration.md, "[eval]")."""

    # Compiles at once, node-wide (0: from the cores, EvalSection.compiles_for).
    max_compiles: int = 0
    compile_jobs: int = 2  # MAX_JOBS of each command: ninja's parallelism within one compile
    # Where each tenant's build folders live ("": <run_dir>/tenant-builds).
    build_dir: str = ""
    fresh_builds: bool = False  # empty a build folder each time a command takes it (no cache kept)
    # A command's own TORCH_EXTENSIONS_DIR, TRITON_CACHE_DIR or MAX_JOBS wins over
    # KREX's. Off by default: an evaluation's folders are the node's to choose.
    command_build_env: bool = False

    def compiles_for(self, tenant_cores: int) -> int:
        """How many compiles may run at once on `tenant_cores` cores (the cores
        left to tenants once the region holders' reserved cores are set aside:
        compiles never run on those). Half of those cores go to compiles, each
        `compile_jobs` wide: the other half stays with the commands that have
        compiled and are feeding their GPU (Python, launches, correctness
        checks), so the GPU does not idle behind a wall of ninja jobs, and a
        batch still keeps compiles in flight while others measure."""
        if self.max_compiles:
            return self.max_compiles
        return max(1, (tenant_cores // 2) // max(1, self.compile_jobs))


@dataclass(frozen=True)
class Config:
    runtime: RuntimeSection = field(default_factory=RuntimeSection)
    gpus: GpuSection = field(default_factory=GpuSection)
    dispatcher: DispatcherSection = field(default_factory=DispatcherSection)
    tenants: TenantSection = field(default_factory=TenantSection)
    regions: RegionSection = field(default_factory=RegionSection)
    telemetry: TelemetrySection = field(default_factory=TelemetrySection)
    pool: PoolSection = field(default_factory=PoolSection)
    forward: ForwardSection = field(default_factory=ForwardSection)
    eval: EvalSection = field(default_factory=EvalSection)
    # Where the config came from: set by load_config, never read from a file.
    source: str = field(default="(built-in defaults)", metadata={"internal": True})

    @property
    def effective_slots_per_gpu(self) -> int:
        """THE slot rule: how many commands a GPU runs at once. One under policy
        `command` (the exclusive baseline), else `dispatcher.slots_per_gpu`; the
        dispatcher admits by it, the node reports it, start-up counts uids by it."""
        return 1 if self.runtime.policy == "command" else self.dispatcher.slots_per_gpu

    @property
    def digest(self) -> str:
        """A short fingerprint of the effective config, recorded in the trace header."""
        return hashlib.sha256(repr(replace(self, source="")).encode()).hexdigest()[:16]
