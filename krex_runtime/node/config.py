"""The runtime's configuration: TOML files loaded into frozen dataclasses.

Every field is documented in docs/configuration.md; keep the two in step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pwd
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from krex_runtime.tenant.auto_region import parse_entry
from krex_runtime.wire.bodies import Mode
from krex_runtime.wire.endpoints import client_run_dir, default_run_dir
from krex_runtime.wire.toml_file import load_toml

Policy = Literal["command", "ungated", "krex"]
POLICIES: tuple[str, ...] = ("command", "ungated", "krex")


class ConfigError(Exception):
    """A config that cannot be used; the message is one line for the operator."""


# Every duration (a key ending in _s or _ms) at most this: about 31 years, so that in
# nanoseconds it still fits the 64-bit fields of the gate and the simulator.
MAX_DURATION_S = 1e9
# zmq takes the message limit as a 64-bit size (runtime.max_message_bytes is it).
MAX_MESSAGE_BYTES = 1 << 30
HOUR, DAY = 3600.0, 86400.0
MAX_TENANT_UIDS = 65536

# The range of every numeric setting (inclusive; items of a list or table by
# `key[]`): past these a value only hurts, e.g. a heartbeat of 1e-9 s spins the
# runtime, 100000 context processes per GPU take the node down. Settings bound
# by another one are checked in `validate` too. docs/configuration.md lists
# the same ranges (tests/node/test_config.py keeps the two in step).
BOUNDS: dict[str, tuple[float, float]] = {
    "runtime.snapshot_interval_s": (0.01, HOUR),
    "runtime.shutdown_grace_s": (0, HOUR),
    "runtime.max_message_bytes": (4096, MAX_MESSAGE_BYTES),
    "runtime.snapshot_finished": (1, 1_000_000),
    "runtime.trace_rotate_bytes": (0, 1 << 40),
    "runtime.max_requests_in_flight": (1, 100_000),
    "runtime.max_requests_per_peer": (1, 100_000),
    "runtime.reply_queue": (16, 1_000_000),
    "gpus.simulated": (0, 1024),
    "gpus.simulated_amd": (0, 1024),
    "gpus.visible[]": (0, 1023),
    "dispatcher.slots_per_gpu": (1, 1024),
    "dispatcher.max_queued": (1, 10_000_000),
    "dispatcher.default_timeout_s": (0.001, MAX_DURATION_S),
    "dispatcher.kill_grace_s": (0, HOUR),
    "dispatcher.orphan_grace_s": (0, 60),
    "dispatcher.keep_finished": (1, 10_000_000),
    "regions.hold_limit_s": (0.001, MAX_DURATION_S),
    "regions.quiesce_timeout_s": (0.001, HOUR),
    "regions.drain_timeout_s": (0.001, HOUR),
    "regions.settle_max_s": (0, 10.0),  # every millisecond of it no tenant uses the GPU
    "regions.settle_poll_s": (0.0001, 0.1),
    "regions.settle_cap_s": (0, 10.0),
    "regions.gap_s": (0, 1.0),  # every region may cost this much more
    "regions.perturbed_cpu_wait_share": (0, 1.0),
    "regions.perturbed_cpu_wait_min_ms": (0, 60_000.0),
    "regions.host_side_wait_s": (0, 60.0),  # every region may wait this much more
    "regions.hold_sample_s": (0, 10.0),
    "regions.heartbeat_interval_s": (0.01, 10.0),
    "regions.stale_after_s": (0.02, HOUR),
    "regions.reserved_cores_per_gpu": (0, 1024),
    "regions.cpu_slices[]": (0, 65535),
    "regions.lease_ttl_s": (0.001, MAX_DURATION_S),
    "regions.channel_hello_timeout_s": (0.01, HOUR),
    "regions.channel_idle_timeout_s": (0.1, DAY),
    "regions.channel_max_messages_per_s": (1, 1_000_000),
    "regions.channel_max_connections": (1, 65536),
    "regions.channel_max_connections_per_uid": (1, 65536),
    "regions.channel_max_connections_per_tenant": (1, 65536),
    "telemetry.sample_interval_s": (0.01, HOUR),
    "telemetry.canary_period_s": (0.01, DAY),
    "telemetry.canary_target_ms": (0.001, 10_000.0),
    "telemetry.canary_window": (1, 100_000),
    "telemetry.clock_tolerance": (1e-6, 0.999999),
    "telemetry.prometheus_max_connections": (1, 1024),
    "tenants.uid_range[]": (1, 2_147_483_647),
    "pool.size_per_gpu": (0, 64),
    "pool.max_commands": (1, 10_000_000),
    "pool.start_timeout_s": (0.1, DAY),
    "pool.clean_timeout_s": (0.1, DAY),
    "forward.servers_per_gpu": (0, 256),
    "forward.ring_kib": (64, 1 << 20),
    "forward.staging_kib": (64, 1 << 20),
    "forward.max_commands": (1, 10_000_000),
    "forward.start_timeout_s": (0.1, DAY),
    "forward.clean_timeout_s": (0.1, DAY),
}


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
    max_commands: int = 1000  # a server is replaced after this many commands
    # Who the context servers run as: "" the runtime's own user, else an account
    # or a bare uid, never one a tenant can be given (node/access.server_run_as).
    server_user: str = ""
    start_timeout_s: float = 60.0
    clean_timeout_s: float = 30.0


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


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Load and validate a config file; None gives the built-in defaults."""
    if path is None:
        return validate(Config())
    config = load_toml(path, Config, ConfigError, "config file")
    return validate(replace(config, source=str(path)))


def validate(config: Config) -> Config:
    """Checks a type alone cannot express; returns the config unchanged."""
    where = config.source
    for key, value in _settings(config):
        if isinstance(value, str) and "\0" in value:
            raise ConfigError(f"{where}: {key} holds a NUL character")
        seconds = None
        if isinstance(value, float):
            seconds = value if key.endswith("_s") else value / 1000 if key.endswith("_ms") else None
        if seconds is not None and seconds > MAX_DURATION_S:
            raise ConfigError(f"{where}: {key} must be at most {MAX_DURATION_S:g} seconds")
        bounds = BOUNDS.get(_bounds_key(key))
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if bounds is not None and number and not bounds[0] <= value <= bounds[1]:
            raise ConfigError(f"{where}: {key} must be between {_number(bounds[0])} and {_number(bounds[1])}")
    env_problem = environment_problem(config.tenants.env)
    entry_problem = auto_region_entry_problem(config.regions.auto_region_entries)
    for problem in (*_kernel_paths(config), cpu_slices_problem(config.regions.cpu_slices), _labels_problem(config),
                    _root_range_problem(config)):
        if problem is not None:
            raise ConfigError(f"{where}: {problem}")
    checks = [
        (entry_problem is None, f"regions.auto_region_entries: {entry_problem}"),
        (env_problem is None, f"tenants.env: {env_problem}"),
        (all(k and k.strip() == k and "=" not in k for k in config.runtime.labels),
         "runtime.labels names must be non-empty, hold no '=' and no leading or trailing space"),
        (all(w > 0 for w in config.dispatcher.share_weights.values()), "dispatcher.share_weights must be positive"),
        *((not tcp or tcp.startswith("tcp://"), f"runtime.{name} must be a tcp:// endpoint")
          for name, tcp in (("control_tcp", config.runtime.control_tcp), ("telemetry_tcp", config.runtime.telemetry_tcp))),
        (
            config.regions.stale_after_s >= 2 * config.regions.heartbeat_interval_s,
            "regions.stale_after_s must be at least twice regions.heartbeat_interval_s",
        ),
        (
            all(k.isascii() and k.isdigit() for k in config.regions.cpu_slices),
            "regions.cpu_slices keys are GPU indices (\"0\", \"1\", ...)",
        ),
        (
            1 <= config.regions.channel_max_connections_per_uid <= config.regions.channel_max_connections,
            "regions.channel_max_connections_per_uid must be between 1 and regions.channel_max_connections",
        ),
        (
            not config.telemetry.prometheus_listen or listen_address(config.telemetry.prometheus_listen) is not None,
            'telemetry.prometheus_listen must be "HOST:PORT" (e.g. "127.0.0.1:9400", "[::1]:9400") or ""',
        ),
        (
            config.runtime.max_requests_per_peer <= config.runtime.max_requests_in_flight,
            "runtime.max_requests_per_peer must be at most runtime.max_requests_in_flight",
        ),
        (
            config.runtime.trace_rotate_bytes == 0 or config.runtime.trace_rotate_bytes >= 4096,
            "runtime.trace_rotate_bytes must be 0 (never rotate) or at least 4096",
        ),
        (all(m and not m.startswith(".") for m in config.pool.preload), "pool.preload holds absolute module names"),
        (
            config.dispatcher.default_mode != "forwarded" or config.forward.servers_per_gpu >= 1,
            'dispatcher.default_mode = "forwarded" needs context servers (forward.servers_per_gpu >= 1)',
        ),
        (
            not config.forward.native_default or config.forward.servers_per_gpu >= 1,
            "forward.native_default needs context servers (forward.servers_per_gpu >= 1)",
        ),
        (
            config.forward.ring_kib & (config.forward.ring_kib - 1) == 0,
            "forward.ring_kib must be a power of two",
        ),
        (
            len(config.tenants.uid_range) in (0, 2),
            "tenants.uid_range is [first uid, how many] (or [] for none)",
        ),
        (
            len(config.tenants.uid_range) != 2
            or (config.tenants.uid_range[1] <= MAX_TENANT_UIDS
                and sum(config.tenants.uid_range) - 1 <= 2_147_483_647),
            f"tenants.uid_range holds at most {MAX_TENANT_UIDS} uids, all below 2147483648",
        ),
        (
            not config.tenants.uid_range or bool(config.tenants.user or config.tenants.group),
            "tenants.uid_range needs tenants.group (or tenants.user, whose group it then is)",
        ),

        (
            config.dispatcher.default_mode != "pooled" or config.pool.size_per_gpu >= 1,
            "dispatcher.default_mode = \"pooled\" needs a context pool (pool.size_per_gpu >= 1)",
        ),
        (
            config.dispatcher.default_mode != "forked" or config.pool.zygote,
            "dispatcher.default_mode = \"forked\" needs the zygotes (pool.zygote = true)",
        ),
        (
            config.regions.gate_backend != "driver-lock" or (config.gpus.simulated_amd == 0 and config.gpus.vendor == "nvidia"),
            "regions.gate_backend = \"driver-lock\" is NVIDIA's checkpoint lock; AMD GPUs need \"preload\"",
        ),
        (
            not config.gpus.simulated_device
            or config.gpus.simulated_device.replace("-", "").replace("_", "").isalnum(),
            "gpus.simulated_device may hold only letters, digits, '-' and '_'",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{where}: {message}")
    return config


# The kernel's own file systems: what is written there is not kept as files
# (a command's output in /proc is lost); /dev/shm is a tmpfs like any other.
KERNEL_TREES = ("/proc", "/sys", "/dev")
KEPT_UNDER_DEV = "/dev/shm"


def _kernel_paths(config: Config) -> list[str | None]:
    """Why a folder the runtime keeps files in cannot be where it is set (None: it can)."""
    folders = (("runtime.run_dir", config.runtime.run_dir), ("runtime.lock_dir", config.runtime.lock_dir),
               ("tenants.output_dir", config.tenants.output_dir))
    return [_kernel_path_problem(key, value) for key, value in folders if value]


def _kernel_path_problem(key: str, value: str) -> str | None:
    real = os.path.realpath(value)  # where it leads: a symbolic link on the way counts as its target
    if real == KEPT_UNDER_DEV or real.startswith(KEPT_UNDER_DEV + "/"):
        return None
    for tree in KERNEL_TREES:
        if real == tree or real.startswith(tree + "/"):
            shown = f"{value!r}" + (f" (that is {real!r})" if real != value else "")
            return (f"{key} = {shown} is in {tree}, a file system of the kernel's that keeps no files of ours "
                    f"(/proc, /sys and /dev are refused, /dev/shm aside)")
    return None


def cpu_slices_problem(slices: dict[str, list[int]], usable: set[int] | None = None) -> str | None:
    """Why `regions.cpu_slices` cannot be used on this machine (None: it can):
    a core that is not one the runtime may run on (os.sched_getaffinity),
    which could neither take the GPU's tenants nor its region holder."""
    cores = usable if usable is not None else set(os.sched_getaffinity(0))
    for gpu, listed in slices.items():
        missing = sorted(set(listed) - cores)
        if missing:
            return (f"regions.cpu_slices.{gpu} names core {missing[0]}, not one of this machine's cores the runtime "
                    f"may use ({_core_ranges(cores)})")
    return None


def _core_ranges(cores: set[int]) -> str:
    """{0, 1, 2, 5} -> "0-2, 5"."""
    ranges: list[list[int]] = []
    for core in sorted(cores):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def _labels_problem(config: Config) -> str | None:
    """Labels are shown one per line (`krex status`, the console, logs): a
    newline or any other control character in one would forge lines."""
    for name, value in config.runtime.labels.items():
        if not (name.isprintable() and value.isprintable()):
            return (f"runtime.labels.{name!r}: names and values may hold only printable characters "
                    f"(no newline or other control character)")
    return None


def _root_range_problem(config: Config) -> str | None:
    """With a uid range, tenants.user gives the tenants its group and home:
    root's would make every tenant a member of root's group."""
    t = config.tenants
    if not t.uid_range or not t.user or t.allow_root or not _is_root(t.user):
        return None
    return (f"tenants.user = {t.user!r} with tenants.uid_range would put every tenant in root's group: name an "
            f"unprivileged account or only tenants.group, or set tenants.allow_root = true")


def _is_root(user: str) -> bool:
    if user == "root":
        return True
    try:
        return pwd.getpwnam(user).pw_uid == 0
    except KeyError:
        return False  # an unknown user is refused at start, by name


def listen_address(text: str) -> tuple[str, int] | None:
    """(host, port) of "HOST:PORT" or "[IPV6]:PORT", or None when it is not one."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        return None
    return host, int(port)


def auto_region_entry_problem(entries: tuple[str, ...] | list[str]) -> str | None:
    """Why one of `entries` cannot name an entry point (None: all can)."""
    for text in entries:
        try:
            parse_entry(text)
        except ValueError as exc:
            return str(exc)
    return None


def environment_problem(env: dict[str, str]) -> str | None:
    """Why no process can be started with `env` (None: it can): the kernel
    takes it as C strings `NAME=value`."""
    for name, value in env.items():
        if not name or "=" in name:
            return f"environment name {name[:60]!r} is empty or holds '='"
        if "\0" in name or "\0" in value:
            return f"environment variable {name[:60]!r} holds a NUL character"
    return None


def _number(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _bounds_key(key: str) -> str:
    """`gpus.visible[2]` -> `gpus.visible[]`; `regions.cpu_slices.0[1]` -> `regions.cpu_slices[]`."""
    section, _, rest = key.partition(".")
    name = rest.split(".", 1)[0].split("[", 1)[0]
    return f"{section}.{name}[]" if rest != name else key


def _settings(config: Config) -> list[tuple[str, Any]]:
    """Every setting as (dotted key, value); list items and table values each on their own."""
    found: list[tuple[str, Any]] = []
    for section in dataclasses.fields(config):
        if section.name == "source":
            continue
        for f in dataclasses.fields(getattr(config, section.name)):
            key, value = f"{section.name}.{f.name}", getattr(getattr(config, section.name), f.name)
            items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, tuple) else ()
            found.append((key, value))
            for k, v in items:
                item = f"{key}.{k}" if isinstance(value, dict) else f"{key}[{k}]"
                found.append((item, v))
                found += [(f"{item}[{i}]", x) for i, x in enumerate(v)] if isinstance(v, list) else []
    return found




def problem_of_file(path: str) -> str:
    """What is wrong with a config file, in one line that names it, read as a
    start would read it; "" when it is valid (`krex-runtime --check-config`
    and `krex check-config` say this)."""
    try:
        validate(load_config(path))
    except ConfigError as exc:
        return f"{path}: {exc}".replace(f"{path}: {path}", path)
    return ""


def resolve_run_dir(config: Config) -> Path:
    """runtime.run_dir, else where every client looks (KREX_RUN_DIR, else the
    system default): `--run-dir` has been folded into the config by then."""
    return Path(config.runtime.run_dir) if config.runtime.run_dir else client_run_dir()


def resolve_simulated_device(config: Config) -> str:
    """gpus.simulated_device, else a name of the run dir's own ("default" for
    the system's default run dir): a run dir serves one runtime at a time, so
    two runtimes with run dirs of their own never meet on one simulated device."""
    if config.gpus.simulated_device:
        return config.gpus.simulated_device
    run_dir = resolve_run_dir(config)
    if run_dir == default_run_dir():
        return "default"
    return "rd" + hashlib.sha256(str(run_dir.absolute()).encode()).hexdigest()[:12]


def resolve_lock_dir(config: Config) -> Path:
    """Locks are node-wide: two runtimes with different run folders still collide here."""
    if config.runtime.lock_dir:
        return Path(config.runtime.lock_dir)
    return Path("/run/lock/krex") if os.geteuid() == 0 else Path(f"/tmp/krex-locks-{os.geteuid()}")
