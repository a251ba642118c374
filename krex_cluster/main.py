"""`krex-cluster`: the cluster gateway's command line.

    krex-cluster head --config cluster.toml [--ray-address auto] [--listen ipc://...|tcp://...]

runs the gateway in the foreground as a Ray driver until SIGTERM or SIGINT.
`--stop-nodes` also stops every node's agent and the runtimes they started
when it ends; without it they keep running, and the next gateway adopts them.
Exit status: 0 after a clean stop, 125 for a failure of its own (as `krex`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import signal
import sys
from dataclasses import replace

from krex_cluster.config import ClusterConfigError, load, validate
from krex_runtime.wire.version import version_line

FAILURE = 125


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="krex-cluster", description="The KREX cluster gateway on Ray.")
    p.add_argument("--version", action="version", version=version_line("krex-cluster"))
    sub = p.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    head = sub.add_parser("head", help="serve the control protocol for every KREX node of the Ray cluster")
    head.add_argument("--config", metavar="FILE", default=os.environ.get("KREX_CLUSTER_CONFIG") or None,
                      help="the cluster config (docs/deployment.md, 'A cluster'); default $KREX_CLUSTER_CONFIG")
    head.add_argument("--ray-address", metavar="ADDRESS", help="override gateway.ray_address (default: auto)")
    head.add_argument("--listen", metavar="ENDPOINT", help="override gateway.listen (ipc://PATH or tcp://HOST:PORT)")
    head.add_argument("--telemetry", metavar="ENDPOINT", help="override gateway.telemetry")
    head.add_argument("--stop-nodes", action="store_true",
                      help="on exit, also stop the nodes' agents and the runtimes they started")
    head.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p.parse_args(argv)


# What `krex-cluster head` says where Ray is not installed.
NO_RAY = "krex-cluster: the cluster gateway needs Ray: pip install 'krex-runtime[cluster]'"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("ray") is None:  # before the config: nothing here runs without it
        print(NO_RAY, file=sys.stderr)
        return FAILURE
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s krex-cluster %(levelname)s %(message)s")
    try:
        config = load(args.config)
        gateway = config.gateway
        gateway = replace(gateway, **{k: v for k, v in (("ray_address", args.ray_address), ("listen", args.listen),
                                                          ("telemetry", args.telemetry)) if v})
        config = validate(replace(config, gateway=gateway))
    except ClusterConfigError as exc:
        print(f"krex-cluster: {exc}", file=sys.stderr)
        return FAILURE
    import ray  # only now: `krex-cluster --help` and config errors need no Ray

    from krex_cluster.gateway import Gateway

    try:
        ray.init(address=config.gateway.ray_address, namespace=config.gateway.namespace,
                 log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        print(f"krex-cluster: cannot join the Ray cluster at {config.gateway.ray_address}: {exc}", file=sys.stderr)
        return FAILURE
    try:
        return asyncio.run(_serve(Gateway(config), args.stop_nodes))
    finally:
        ray.shutdown()


async def _serve(gateway: object, stop_nodes: bool) -> int:
    from krex_cluster.gateway import Gateway

    assert isinstance(gateway, Gateway)
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, ended.set)
    try:
        gateway.bind()
    except Exception as exc:
        print(f"krex-cluster: cannot serve on {gateway.listen}: {exc}", file=sys.stderr)
        return FAILURE
    serving = asyncio.ensure_future(gateway.run(bound=True))
    await asyncio.wait([serving, asyncio.ensure_future(ended.wait())], return_when=asyncio.FIRST_COMPLETED)
    await gateway.stop(stop_nodes=stop_nodes)
    serving.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(main())
