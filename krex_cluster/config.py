"""The cluster gateway's configuration: a TOML file into frozen dataclasses,
strict as the runtime's (an unknown key is an error naming the nearest one).

    [gateway]
    listen = "ipc:///run/krex-cluster/control.sock"

    [nodes.gpu-a]              # the Ray node started with --labels krex-node=gpu-a
    runtime = "start"          # the agent starts and supervises krex-runtime
    config = "/etc/krex/krex.toml"

    [nodes.gpu-b]
    runtime = "attach"         # the agent fronts the runtime systemd runs
    run_dir = "/run/krex"

docs/deployment.md, "A cluster", describes every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from krex_runtime.wire.toml_file import load_toml

# The Ray node label that names a KREX node (`ray start --labels krex-node=NAME`).
NODE_LABEL = "krex-node"
# Detached agents live in this Ray namespace, named AGENT_PREFIX + node name,
# so a restarted gateway finds the ones already running.
AGENT_PREFIX = "krex-agent:"


class ClusterConfigError(Exception):
    """A cluster config that cannot be used; one line for the operator."""


@dataclass(frozen=True)
class GatewaySection:
    name: str = "cluster"  # what `hello` and `status` call the cluster
    listen: str = ""  # control endpoint: ipc://PATH or tcp://HOST:PORT (CURVE); "": ipc in the run dir
    telemetry: str = ""  # PUB endpoint; "": telemetry.sock beside an ipc `listen`
    run_dir: str = ""  # "": /tmp/krex-cluster-$UID
    ray_address: str = "auto"
    namespace: str = "krex"
    access_group: str = ""  # operators' group: control.sock 0660; "": owner only (0600)
    curve_server_key: str = ""  # tcp: the gateway's NAME.key_secret
    curve_clients: str = ""  # tcp: folder of authorized client public keys
    max_message_bytes: int = 1 << 20
    max_requests_in_flight: int = 1024  # being answered at once; one more is answered `busy` (as a runtime)
    max_requests_per_peer: int = 64  # the same, per client connection
    keep_finished: int = 10_000  # finished commands whose results `wait` still finds
    max_held: int = 10_000  # held because no node can take them yet (kept in held.json); one more: `queue_full`
    output_kept_bytes: int = 1 << 20  # per command, replayed to a later `wait`; the node keeps it all
    membership_interval_s: float = 1.0  # how often Ray's node list is read
    cluster_interval_s: float = 2.0  # the `cluster` telemetry message at least this often
    agent_start_timeout_s: float = 60.0


@dataclass(frozen=True)
class NodeSpec:
    runtime: Literal["start", "attach"] = "start"
    config: str = ""  # start: krex-runtime --config FILE ("": its defaults)
    sim: int = 0  # start: --sim N simulated GPUs (0: the node's real GPUs)
    run_dir: str = ""  # attach: the runtime's run dir; start: --run-dir ("": the config's)
    env: dict[str, str] = field(default_factory=dict)  # start: more environment (e.g. CUDA_VISIBLE_DEVICES)
    restart_delay_s: float = 1.0  # start: after the runtime ended, start it again this much later
    poll_interval_s: float = 0.25  # how often the agent asks its runtime for status (load)
    lost_after_s: float = 3.0  # unanswered this long, the runtime counts as gone (start: it is killed)
    log: str = ""  # start: the runtime's output appended here ("": the agent's, in Ray's worker logs)


@dataclass(frozen=True)
class ClusterConfig:
    gateway: GatewaySection = field(default_factory=GatewaySection)
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    source: str = field(default="(built-in defaults)", metadata={"internal": True})


def load(path: str | Path | None) -> ClusterConfig:
    if path is None:
        return validate(ClusterConfig())
    config = load_toml(path, ClusterConfig, ClusterConfigError, "cluster config")
    return validate(replace(config, source=str(path)))


def validate(config: ClusterConfig) -> ClusterConfig:
    where, g = config.source, config.gateway
    checks = [
        (not g.listen or g.listen.startswith(("ipc://", "tcp://")), "gateway.listen must be ipc:// or tcp://"),
        (not g.listen.startswith("tcp://") or bool(g.curve_server_key and g.curve_clients),
         "gateway.listen on tcp needs gateway.curve_server_key and gateway.curve_clients (CURVE only)"),
        (not g.telemetry or g.telemetry.startswith(("ipc://", "tcp://")), "gateway.telemetry must be ipc:// or tcp://"),
        (bool(g.telemetry) or not g.listen.startswith("tcp://"), "a tcp gateway.listen needs gateway.telemetry"),
        (4096 <= g.max_message_bytes <= 1 << 30, "gateway.max_message_bytes must be between 4096 and 1073741824"),
        (1 <= g.max_requests_per_peer <= g.max_requests_in_flight <= 100_000,
         "gateway.max_requests_per_peer must be at least 1 and at most gateway.max_requests_in_flight (<= 100000)"),
        (1 <= g.keep_finished <= 10_000_000, "gateway.keep_finished must be between 1 and 10000000"),
        (1 <= g.max_held <= 1_000_000, "gateway.max_held must be between 1 and 1000000"),
        (0 <= g.output_kept_bytes <= 1 << 30, "gateway.output_kept_bytes must be between 0 and 1073741824"),
        (0.05 <= g.membership_interval_s <= 3600, "gateway.membership_interval_s must be between 0.05 and 3600"),
        (0.1 <= g.cluster_interval_s <= 3600, "gateway.cluster_interval_s must be between 0.1 and 3600"),
        (1 <= g.agent_start_timeout_s <= 3600, "gateway.agent_start_timeout_s must be between 1 and 3600"),
    ]
    for name, spec in config.nodes.items():
        checks += [
            (bool(name) and name.replace("-", "").replace("_", "").replace(".", "").isalnum(),
             f"nodes.{name}: a node name holds letters, digits, '-', '_' and '.' only"),
            (spec.runtime != "attach" or bool(spec.run_dir), f"nodes.{name}.run_dir: attach needs the runtime's run dir"),
            (0 <= spec.sim <= 1024, f"nodes.{name}.sim must be between 0 and 1024"),
            (0 <= spec.restart_delay_s <= 3600, f"nodes.{name}.restart_delay_s must be between 0 and 3600"),
            (0.01 <= spec.poll_interval_s <= 60, f"nodes.{name}.poll_interval_s must be between 0.01 and 60"),
            (0.1 <= spec.lost_after_s <= 3600, f"nodes.{name}.lost_after_s must be between 0.1 and 3600"),
        ]
    for ok, message in checks:
        if not ok:
            raise ClusterConfigError(f"{where}: {message}")
    return config


def default_run_dir() -> Path:
    import os

    return Path(f"/tmp/krex-cluster-{os.geteuid()}")
