"""The rules a config must keep beyond its types: every value in its range,
folders, cores and labels the machine can take, and the settings bound by
another one (a mode that needs its pool or servers, a uid range that needs a
group). `validate` applies them all and names the first one broken.
"""

from __future__ import annotations

import os

from krex_runtime.node.config.bounds import MAX_TENANT_UIDS, range_problem
from krex_runtime.node.config.problems import (
    auto_region_entry_problem,
    cpu_slices_problem,
    environment_problem,
    kernel_path_problems,
    labels_problem,
    listen_address,
    root_range_problem,
)
from krex_runtime.node.config.sections import Config, ConfigError


def validate(config: Config) -> Config:
    """Checks a type alone cannot express; returns the config unchanged."""
    where = config.source
    out_of_range = range_problem(config)
    if out_of_range is not None:
        raise ConfigError(f"{where}: {out_of_range}")
    for problem in (*kernel_path_problems(config), cpu_slices_problem(config.regions.cpu_slices),
                    labels_problem(config), root_range_problem(config)):
        if problem is not None:
            raise ConfigError(f"{where}: {problem}")
    for ok, message in (*_service_checks(config), *_launch_checks(config)):
        if not ok:
            raise ConfigError(f"{where}: {message}")
    return config


def _service_checks(config: Config) -> list[tuple[bool, str]]:
    """(holds, what is wrong otherwise) for the runtime's, dispatcher's,
    regions' and telemetry's settings."""
    env_problem = environment_problem(config.tenants.env)
    entry_problem = auto_region_entry_problem(config.regions.auto_region_entries)
    return [
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
        (not config.eval.build_dir or os.path.isabs(config.eval.build_dir),
         "eval.build_dir must be an absolute path (or \"\" for <run_dir>/tenant-builds)"),
    ]


def _launch_checks(config: Config) -> list[tuple[bool, str]]:
    """(holds, what is wrong otherwise) for how commands start: the modes and
    what each needs, forwarding's ring, the tenants' uids, the GPUs' vendors."""
    return [
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
