"""The numeric range of every setting, and the check that each value of a
config lies in its range (durations past MAX_DURATION_S and NUL characters
in text are refused with them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from krex_runtime.node.config.sections import Config

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
    "forward.pinned_mib": (0, 1 << 20),
    "forward.max_commands": (1, 10_000_000),
    "forward.start_timeout_s": (0.1, DAY),
    "forward.clean_timeout_s": (0.1, DAY),
    "eval.max_compiles": (0, 4096),  # 0: from the cores
    "eval.compile_jobs": (1, 1024),
}


def range_problem(config: Config) -> str | None:
    """Why one setting of `config` lies outside its range (None: none does)."""
    for key, value in _settings(config):
        if isinstance(value, str) and "\0" in value:
            return f"{key} holds a NUL character"
        seconds = None
        if isinstance(value, float):
            seconds = value if key.endswith("_s") else value / 1000 if key.endswith("_ms") else None
        if seconds is not None and seconds > MAX_DURATION_S:
            return f"{key} must be at most {MAX_DURATION_S:g} seconds"
        bounds = BOUNDS.get(_bounds_key(key))
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if bounds is not None and number and not bounds[0] <= value <= bounds[1]:
            return f"{key} must be between {shown_number(bounds[0])} and {shown_number(bounds[1])}"
    return None


def shown_number(x: float) -> str:
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
