"""`krex-runtime`: the headless service of one GPU node, in the foreground.

Exit status: 0 after a clean stop; 125 for every failure of KREX's own (a
usage error, a bad config, no GPUs, a node already claimed), so that the
statuses of the programs KREX runs (1, 2, ...) never read as KREX's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from dataclasses import replace
from typing import NoReturn

from krex_runtime.node.config import (
    POLICIES,
    Config,
    ConfigError,
    load_config,
    problem_of_file,
    resolve_simulated_device,
    validate,
)
from krex_runtime.node.gpus import Gpu, GpuDiscoveryError, discover
from krex_runtime.node.locks import ClaimError
from krex_runtime.service.host import check_before_claims, recover_left_state
from krex_runtime.service.runtime import RuntimeService, StartupError
from krex_runtime.wire.version import version_line

FAILURE = 125  # the same status as `krex`'s own failures
CONFIG_ENV = "KREX_CONFIG"  # the config's path when --config is not given


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2, a status a program's own failure may have
        self.print_usage(sys.stderr)
        self.exit(FAILURE, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(
        prog="krex-runtime",
        description="Serve this node's GPUs to benchmark commands, exclusive only inside marked regions.",
    )
    p.add_argument("--version", action="version", version=version_line("krex-runtime"))
    p.add_argument(
        "--config", metavar="FILE", default=os.environ.get(CONFIG_ENV) or None,
        help=f"TOML config (see docs/configuration.md); default ${CONFIG_ENV}, else the built-in defaults",
    )
    p.add_argument("--sim", type=int, metavar="N", help="serve N simulated GPUs instead of the real ones")
    p.add_argument("--policy", choices=POLICIES, help="override runtime.policy")
    p.add_argument("--run-dir", metavar="DIR",
                   help="override runtime.run_dir (sockets, trace, output); neither given: $KREX_RUN_DIR, else the system default")
    p.add_argument("--trace", metavar="FILE", help="override runtime.trace_path")
    p.add_argument(
        "--check-config", metavar="FILE",
        help="read FILE as the runtime would and exit: 0 when it is valid, else 125 with what is wrong in one line",
    )
    p.add_argument(
        "--recover", action="store_true",
        help="serve nothing: thaw and reopen what a runtime that died left in its run dir, then exit "
        "(a unit's ExecStopPost=; run it in the runtime's cgroup)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p.parse_args(argv)


def effective_config(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    runtime = config.runtime
    if args.policy:
        runtime = replace(runtime, policy=args.policy)
    if args.run_dir:
        runtime = replace(runtime, run_dir=args.run_dir)
    if args.trace:
        runtime = replace(runtime, trace_path=args.trace)
    if args.sim is not None and args.sim < 1:
        raise ConfigError("--sim needs at least 1 GPU")
    config = validate(replace(config, runtime=runtime))
    return replace(config, gpus=replace(config.gpus, simulated_device=resolve_simulated_device(config)))


def check_config(path: str) -> int:
    """`--check-config FILE`: every check a start with FILE makes before it
    claims the node (its run folder, GPUs and simulated device), start nothing.
    A file that once checked `valid` was refused by the start (issue 47, F12)."""
    problem = problem_of_file(path)
    if not problem:
        try:
            config = load_config(path)
            simulated = config.gpus.simulated + config.gpus.simulated_amd > 0
            gpus = discover(config) if simulated else None  # real GPUs are the node's, found at start
            check_before_claims(config, gpus)
        except (ConfigError, GpuDiscoveryError, StartupError) as exc:
            problem = f"{path}: {exc}"
    if problem:
        print(f"krex-runtime: {problem}", file=sys.stderr)
        return FAILURE
    print(f"{path}: valid")
    return 0


def root_on_simulator(config: Config, gpus: list[Gpu]) -> Config:
    """Started as root on simulated GPUs only (a laptop, a CI container), tenants
    may run as root: nothing of a real GPU node is at stake. Said in one line."""
    t = config.tenants
    if os.geteuid() != 0 or t.user or t.uid_range or t.allow_root or not gpus or not all(g.simulated for g in gpus):
        return config
    print("krex-runtime: notice: tenants run as root (allowed on simulated GPUs only; "
          "on real GPUs set tenants.user)", file=sys.stderr)
    return replace(config, tenants=replace(t, allow_root=True))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s krex-runtime %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if args.check_config is not None:
        return check_config(args.check_config)
    try:
        config = effective_config(args)
        if args.recover:
            for line in recover_left_state(config):
                print(f"krex-runtime: recovery: {line}", file=sys.stderr)
            return 0
        gpus = discover(config, args.sim)
        config = root_on_simulator(config, gpus)
        service = RuntimeService(config, gpus)
        asyncio.run(service.run())
    except (ConfigError, GpuDiscoveryError, ClaimError, StartupError) as exc:
        print(f"krex-runtime: {exc}", file=sys.stderr)
        return FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
