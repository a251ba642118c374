# PYTHON_ARGCOMPLETE_OK
"""`krex`: submit commands to a KREX runtime, wait for them, inspect it.

A thin layer over the Python API (krex_runtime.api): the parser
(parser.py), what each subcommand does (subcommands.py), how status and trace
summaries look (views.py).

Exit status (README, "The krex command"): the command's own exit code;
128+N when signal N ended it; 124 when it ran past its time limit; 125 when
KREX itself failed (no runtime, a refused request, a usage error).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from krex_runtime.api import Client, RequestFailed, RuntimeUnavailable
from krex_runtime.cli import cancel, eval_command, external
from krex_runtime.cli.parser import build_parser
from krex_runtime.cli.subcommands import (
    WITH_RUNTIME,
    UsageError,
    check_cluster,
    check_config_command,
    check_usage,
    completion_command,
    config_command,
    fail,
    keys_command,
    trace_command,
    verb_command,
)
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol.envelope import EXIT_SIGNAL_BASE

__all__ = ["main", "version"]


def version() -> str:
    """`krex --version`: the installed distribution's version (whatever the
    distribution is named) and the protocol this client speaks."""
    from importlib import metadata

    names = metadata.packages_distributions().get("krex_runtime") or []
    try:
        number = metadata.version(names[0]) if names else "unknown (not installed)"
    except metadata.PackageNotFoundError:
        number = "unknown (not installed)"
    return f"krex {number} (protocol {protocol.VERSION})"


def main(argv: list[str] | None = None) -> int:
    _escape_what_cannot_be_written()
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        # The reader of our stdout left (`krex status | head -1`): stop quietly,
        # as a program killed by SIGPIPE would, with nothing left to flush.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_SIGNAL_BASE + signal.SIGPIPE


def _escape_what_cannot_be_written() -> None:
    """Whatever a string holds, writing it never ends krex in a traceback:
    what the terminal's encoding cannot write (a lone surrogate from a
    runtime, a non-ASCII label under LANG=C) is written as its escape. The
    views escape control characters themselves (wire/printable.py)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def _main(argv: list[str]) -> int:
    if argv[:1] and argv[0] in external.EXTERNAL:  # its own options, --help included, belong to it
        return _external(argv[0], argv[1:], argparse.Namespace(json=False))
    parser = build_parser(version)
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions: answer and exit
        import argcomplete

        external.complete_in_program(parser)
        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.run_dir:
        os.environ["KREX_RUN_DIR"] = args.run_dir
    try:
        if args.verb in external.EXTERNAL:  # after krex's own options (`krex --run-dir D bench ...`)
            return _external(args.verb, args.external_args, args)
        local = {"trace": trace_command, "keys": keys_command, "config": config_command,
                 "check-config": check_config_command, "completion": completion_command}.get(args.verb)
        if local is not None:
            return local(args)
        return _with_runtime(args)
    except UsageError as exc:
        subcommand_parser(parser, args.verb).print_usage(sys.stderr)
        return fail(args, "usage", str(exc))
    except KeyboardInterrupt:
        return EXIT_SIGNAL_BASE + signal.SIGINT


def _external(name: str, args: list[str], options: argparse.Namespace) -> int:
    """`krex NAME ...` of an external subcommand: its program takes over (external.py)."""
    try:
        external.run(name, args)
    except external.NotInstalled as exc:
        return fail(options, "not_installed", str(exc))


def subcommand_parser(parser: argparse.ArgumentParser, verb: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and verb in action.choices:
            found: argparse.ArgumentParser = action.choices[verb]
            return found
    return parser


# Subcommands that talk to a runtime: the plain verbs' and those of subcommands.py, and cancel's and eval's own modules.
RUNTIME_COMMANDS = {**WITH_RUNTIME, "cancel": cancel.cancel_command, "eval": eval_command.eval_command}


def _with_runtime(args: argparse.Namespace) -> int:
    check_usage(args)
    if args.verb == "cancel":
        cancel.check_usage(args)
    if args.verb == "eval":
        eval_command.check_usage(args)
    try:
        endpoint = args.cluster or args.endpoint
        with Client(endpoint, curve_client_key=args.curve_client_key, curve_server_key=args.curve_server_key) as client:
            if args.cluster:
                check_cluster(client, args.cluster)
            return RUNTIME_COMMANDS.get(args.verb, verb_command)(client, args)
    except RuntimeUnavailable as exc:
        return fail(args, "unavailable", f"{exc}; {how_to_start()}")
    except (RequestFailed, protocol.ProtocolError) as exc:  # ProtocolError: a reply that is not one
        return fail(args, exc.code, exc.reason, show_code=True)


def how_to_start() -> str:
    """A command that starts a runtime here as written. Root must say in a
    config file who tenants run as (docs/configuration.md, [tenants])."""
    run_dir = os.environ.get("KREX_RUN_DIR")
    where = f" --run-dir {run_dir}" if run_dir else ""
    if os.geteuid() == 0:
        return (
            f"start one with `krex-runtime --config FILE{where}` (add `--sim 2` without GPUs), FILE the output of "
            f"`krex config default` with [tenants] user = \"NAME\" (or allow_root = true)"
        )
    return f"start one with `krex-runtime{where}` (this node's GPUs) or `krex-runtime --sim 2{where}` (simulated GPUs)"
