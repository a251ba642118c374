"""`krex-console`: its command line, and the app it starts (live or replay).

    krex-console [--connect ENDPOINT] [--read-only] [--run-dir DIR]
    krex-console --cluster ENDPOINT [--read-only]      # a cluster gateway: a Nodes view, each node's views
    krex-console --replay TRACE [--at S] [--speed X] [--paused]   # TRACE a file, or a cluster trace directory
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from krex_console.app import KrexConsole
from krex_console.cluster.console import ClusterConsole
from krex_console.cluster.nodes_feed import ClusterReplayFeed
from krex_console.feed import ReplayFeed
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.trace.cluster import is_cluster_trace, read_cluster_trace
from krex_runtime.wire.trace.jsonl import TraceError, read_trace


def version() -> str:
    """The version of the distribution that installed this console ("unknown"
    when it runs from a checkout that was never installed)."""
    from importlib import metadata

    for dist in metadata.packages_distributions().get("krex_console", []):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="krex-console", description="The operator console of a KREX node.")
    p.add_argument("--version", action="version", version=f"krex-console {version()}")
    p.add_argument("--connect", metavar="ENDPOINT", help="control endpoint (default: this node's runtime)")
    p.add_argument("--cluster", metavar="ENDPOINT", help="a cluster gateway's control endpoint: every node, each node's views")
    p.add_argument("--telemetry", metavar="ENDPOINT",
                   help="telemetry endpoint (default: beside the control socket; a gateway's: the one its hello names)")
    p.add_argument("--run-dir", metavar="DIR", help="the runtime's run dir (default: KREX_RUN_DIR, else the system default)")
    p.add_argument("--read-only", action="store_true", help="use the read-only control socket; no actions")
    p.add_argument("--replay", metavar="TRACE", help="play a recorded trace (a file, or a cluster trace directory) instead of a live runtime")
    p.add_argument("--at", type=float, default=0.0, metavar="S", help="replay: start S seconds into the trace")
    p.add_argument("--speed", type=float, default=1.0, help="replay: speed factor (default 1)")
    p.add_argument("--paused", action="store_true", help="replay: start paused")
    return p


def endpoints_for(args: argparse.Namespace) -> tuple[str, str]:
    """The control and telemetry endpoints, found the way the `krex` CLI finds them."""
    if args.run_dir:
        os.environ["KREX_RUN_DIR"] = args.run_dir
    control = args.connect or endpoints.client_control()
    if args.read_only and control.startswith("ipc://") and control.endswith("/" + endpoints.CONTROL_SOCKET):
        control = control[: -len(endpoints.CONTROL_SOCKET)] + endpoints.CONTROL_READ_ONLY_SOCKET
    telemetry = args.telemetry or endpoints.client_telemetry(control)
    return control, telemetry


def make_app(args: argparse.Namespace) -> KrexConsole:
    if args.replay and is_cluster_trace(Path(args.replay)):
        cluster = ClusterReplayFeed(read_cluster_trace(Path(args.replay)))
        cluster.speed, cluster.paused = args.speed, args.paused
        if args.at:
            cluster.seek_offset(args.at)
        return ClusterConsole(replay=cluster)
    if args.replay:
        feed = ReplayFeed(read_trace(Path(args.replay)))
        feed.speed = args.speed
        feed.paused = args.paused
        if args.at:
            feed.seek_offset(args.at)
        return KrexConsole(replay=feed)
    if args.cluster:
        if args.connect or args.run_dir:
            raise SystemExit("krex-console: --cluster names the gateway: leave out --connect and --run-dir")
        return ClusterConsole(control=args.cluster, telemetry=args.telemetry, read_only=args.read_only)
    control, telemetry = endpoints_for(args)
    if not telemetry:
        raise SystemExit("krex-console: no telemetry endpoint for a non-ipc control endpoint: give --telemetry")
    return KrexConsole(control=control, telemetry=telemetry, read_only=args.read_only)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        app = make_app(args)
    except TraceError as exc:
        print(f"krex-console: {exc}", file=sys.stderr)
        return 1
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
