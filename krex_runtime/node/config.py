"""The runtime's configuration: TOML files loaded into frozen dataclasses.

Every field is documented in docs/configuration.md; keep the two in step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from krex_runtime.tenant.auto_region import parse_entry
from krex_runtime.wire.endpoints import default_run_dir
from krex_runtime.wire.typed import ShapeError, from_dict

Policy = Literal["command", "ungated", "krex"]
POLICIES: tuple[str, ...] = ("command", "ungated", "krex")


class ConfigError(Exception):
    """A config that cannot be used; the message is one line for the operator."""


# Every duration (a key ending in _s or _ms) at most this: about 31 years, so that in
# nanoseconds it still fits the 64-bit fields of the gate and the simulator.
MAX_DURATION_S = 1e9
# zmq takes the message limit as a 64-bit size and the runtime sets 16 times it.
MAX_MESSAGE_BYTES = 1 << 30


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


@dataclass(frozen=True)
class GpuSection:
    simulated: int = 0
    simulated_device: str = "default"
    simulated_log: str = ""
    visible: tuple[int, ...] = ()


@dataclass(frozen=True)
class DispatcherSection:
    slots_per_gpu: int = 16  # measured: docs/BENCHMARKS.md, "Evaluation"
    max_queued: int = 100_000
    default_timeout_s: float = 3600.0
    kill_grace_s: float = 2.0
    keep_finished: int = 10_000
    share_weights: dict[str, float] = field(default_factory=dict)  # share key -> weight (others: 1)


@dataclass(frozen=True)
class TenantSection:
    preload: bool = True
    cgroups: Literal["auto", "v2", "v1", "off"] = "auto"
    output_dir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    allow_root: bool = False


@dataclass(frozen=True)
class RegionSection:
    gate_backend: Literal["preload", "driver-lock"] = "preload"
    protection: Literal["gpu+cpu", "gpu-only"] = "gpu+cpu"
    hold_limit_s: float = 60.0
    on_hold_limit: Literal["revoke", "kill"] = "revoke"
    quiesce_timeout_s: float = 5.0
    drain_timeout_s: float = 10.0
    heartbeat_interval_s: float = 0.5
    stale_after_s: float = 3.0
    reserved_cores_per_gpu: int = 1
    cpu_slices: dict[str, list[int]] = field(default_factory=dict)
    lease_ttl_s: float = 3600.0
    channel_hello_timeout_s: float = 5.0
    channel_max_messages_per_s: int = 1000
    channel_max_connections: int = 256
    channel_max_connections_per_uid: int = 128
    auto_region: bool = False  # commands' timing harnesses run in regions unless a submit says otherwise
    auto_region_entries: tuple[str, ...] = ()  # more entry points: "module:function", "module:Class.method"


@dataclass(frozen=True)
class TelemetrySection:
    sample_interval_s: float = 1.0
    canary: bool = True
    canary_period_s: float = 10.0
    canary_outside: bool = True
    canary_target_ms: float = 1.0
    canary_window: int = 30
    clock_tolerance: float = 0.10
    prometheus_listen: str = ""  # "HOST:PORT" serves /metrics there; "" = no exporter



@dataclass(frozen=True)
class PoolSection:
    size_per_gpu: int = 0
    preload: tuple[str, ...] = ()
    context: Literal["auto", "driver", "torch", "none"] = "auto"
    max_commands: int = 100
    health_check: bool = True
    start_timeout_s: float = 120.0
    clean_timeout_s: float = 120.0


@dataclass(frozen=True)
class Config:
    runtime: RuntimeSection = field(default_factory=RuntimeSection)
    gpus: GpuSection = field(default_factory=GpuSection)
    dispatcher: DispatcherSection = field(default_factory=DispatcherSection)
    tenants: TenantSection = field(default_factory=TenantSection)
    regions: RegionSection = field(default_factory=RegionSection)
    telemetry: TelemetrySection = field(default_factory=TelemetrySection)
    pool: PoolSection = field(default_factory=PoolSection)
    # Where the config came from: set by load_config, never read from a file.
    source: str = field(default="(built-in defaults)", metadata={"internal": True})

    @property
    def digest(self) -> str:
        """A short fingerprint of the effective config, recorded in the trace header."""
        return hashlib.sha256(repr(replace(self, source="")).encode()).hexdigest()[:16]


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Load and validate a config file; None gives the built-in defaults."""
    if path is None:
        return validate(Config())
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        config = from_dict(Config, data)
    except ShapeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
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
    env_problem = environment_problem(config.tenants.env)
    entry_problem = auto_region_entry_problem(config.regions.auto_region_entries)
    checks = [
        (entry_problem is None, f"regions.auto_region_entries: {entry_problem}"),
        (env_problem is None, f"tenants.env: {env_problem}"),
        (config.dispatcher.slots_per_gpu >= 1, "dispatcher.slots_per_gpu must be at least 1"),
        (config.dispatcher.max_queued >= 1, "dispatcher.max_queued must be at least 1"),
        (config.dispatcher.default_timeout_s > 0, "dispatcher.default_timeout_s must be positive"),
        (config.dispatcher.kill_grace_s >= 0, "dispatcher.kill_grace_s must not be negative"),
        (config.dispatcher.keep_finished >= 1, "dispatcher.keep_finished must be at least 1"),
        (all(w > 0 for w in config.dispatcher.share_weights.values()), "dispatcher.share_weights must be positive"),
        (config.gpus.simulated >= 0, "gpus.simulated must not be negative"),
        (all(i >= 0 for i in config.gpus.visible), "gpus.visible holds GPU indices (>= 0)"),
        (config.runtime.snapshot_interval_s > 0, "runtime.snapshot_interval_s must be positive"),
        (config.runtime.shutdown_grace_s >= 0, "runtime.shutdown_grace_s must not be negative"),
        (config.runtime.snapshot_finished >= 1, "runtime.snapshot_finished must be at least 1"),
        (
            4096 <= config.runtime.max_message_bytes <= MAX_MESSAGE_BYTES,
            f"runtime.max_message_bytes must be between 4096 and {MAX_MESSAGE_BYTES}",
        ),
        (
            not config.runtime.control_tcp or config.runtime.control_tcp.startswith("tcp://"),
            "runtime.control_tcp must be a tcp:// endpoint",
        ),
        (
            not config.runtime.telemetry_tcp or config.runtime.telemetry_tcp.startswith("tcp://"),
            "runtime.telemetry_tcp must be a tcp:// endpoint",
        ),
        (config.regions.hold_limit_s > 0, "regions.hold_limit_s must be positive"),
        (config.regions.quiesce_timeout_s > 0, "regions.quiesce_timeout_s must be positive"),
        (config.regions.drain_timeout_s > 0, "regions.drain_timeout_s must be positive"),
        (config.regions.heartbeat_interval_s > 0, "regions.heartbeat_interval_s must be positive"),
        (
            config.regions.stale_after_s >= 2 * config.regions.heartbeat_interval_s,
            "regions.stale_after_s must be at least twice regions.heartbeat_interval_s",
        ),
        (config.regions.reserved_cores_per_gpu >= 0, "regions.reserved_cores_per_gpu must not be negative"),
        (
            all(k.isascii() and k.isdigit() for k in config.regions.cpu_slices),
            "regions.cpu_slices keys are GPU indices (\"0\", \"1\", ...)",
        ),
        (config.regions.lease_ttl_s > 0, "regions.lease_ttl_s must be positive"),
        (config.regions.channel_hello_timeout_s > 0, "regions.channel_hello_timeout_s must be positive"),
        (config.regions.channel_max_messages_per_s >= 1, "regions.channel_max_messages_per_s must be at least 1"),
        (config.regions.channel_max_connections >= 1, "regions.channel_max_connections must be at least 1"),
        (
            1 <= config.regions.channel_max_connections_per_uid <= config.regions.channel_max_connections,
            "regions.channel_max_connections_per_uid must be between 1 and regions.channel_max_connections",
        ),
        (config.telemetry.sample_interval_s > 0, "telemetry.sample_interval_s must be positive"),
        (config.telemetry.canary_period_s > 0, "telemetry.canary_period_s must be positive"),
        (config.telemetry.canary_target_ms > 0, "telemetry.canary_target_ms must be positive"),
        (config.telemetry.canary_window >= 1, "telemetry.canary_window must be at least 1"),
        (0 < config.telemetry.clock_tolerance < 1, "telemetry.clock_tolerance is a fraction between 0 and 1"),
        (
            not config.telemetry.prometheus_listen or listen_address(config.telemetry.prometheus_listen) is not None,
            'telemetry.prometheus_listen must be "HOST:PORT" (e.g. "127.0.0.1:9400", "[::1]:9400") or ""',
        ),
        (config.pool.size_per_gpu >= 0, "pool.size_per_gpu must not be negative"),
        (config.pool.max_commands >= 1, "pool.max_commands must be at least 1"),
        (config.pool.start_timeout_s > 0, "pool.start_timeout_s must be positive"),
        (config.pool.clean_timeout_s > 0, "pool.clean_timeout_s must be positive"),
        (all(m and not m.startswith(".") for m in config.pool.preload), "pool.preload holds absolute module names"),
        (
            config.gpus.simulated_device.replace("-", "").replace("_", "").isalnum(),
            "gpus.simulated_device may hold only letters, digits, '-' and '_'",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{where}: {message}")
    return config


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
            found += [(f"{key}.{k}" if isinstance(value, dict) else f"{key}[{k}]", v) for k, v in items]
    return found




def resolve_run_dir(config: Config) -> Path:
    return Path(config.runtime.run_dir) if config.runtime.run_dir else default_run_dir()


def resolve_lock_dir(config: Config) -> Path:
    """Locks are node-wide: two runtimes with different run folders still collide here."""
    if config.runtime.lock_dir:
        return Path(config.runtime.lock_dir)
    return Path("/run/lock/krex") if os.geteuid() == 0 else Path(f"/tmp/krex-locks-{os.geteuid()}")
