"""`krex`'s command line: one subcommand per verb of the table (wire/protocol/verbs.py)
plus the client-side ones (run, eval, trace, keys, config, check-config, completion,
bench), every one with `--json`.

A usage error exits 125 like every other KREX failure (argparse's own 2
would read as the command's exit code 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from krex_runtime.cli import eval_command
from krex_runtime.transport.keys import CLIENT_KEY_ENV, SERVER_KEY_ENV
from krex_runtime.wire.protocol import verbs
from krex_runtime.wire.protocol.bodies import submit_modes
from krex_runtime.wire.protocol.envelope import EXIT_KREX_ERROR, EXIT_SIGNAL_BASE, EXIT_TIMEOUT

COMPLETION_SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")

# `krex`'s exit status, the one table (README and docs/api.md show it; a test keeps them in step).
EXIT_STATUS_TABLE: tuple[tuple[str, str], ...] = (
    ("0", "the command exited 0; any other subcommand did what it was asked"),
    ("1-123", "the command's own exit code (`run`, `wait`); 1 from `krex eval`: the candidate is not correct, or its result not trusted"),
    (str(EXIT_TIMEOUT), "the command ran past its time limit (`--timeout`) and was ended"),
    (str(EXIT_KREX_ERROR), "KREX failed: no runtime, a refused request, a usage error, a trace that does not read"),
    ("126, 127", "the program may not be executed, or was not found (as in a shell)"),
    (f"{EXIT_SIGNAL_BASE}+N", "signal N ended the command (137: SIGKILL); 141: krex's reader went away (SIGPIPE)"),
)


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors exiting 125 (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_KREX_ERROR, f"{self.prog}: error: {message}\n")


def _json_option() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--json", action="store_true",
        help="print one JSON document on stdout (run and wait: the result, the command's output inside it)",
    )
    return parent


def _version_action(version: Callable[[], str]) -> type[argparse.Action]:
    """--version, worked out only when asked (finding the installed
    distribution reads every package's metadata)."""

    class Version(argparse.Action):
        def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                     default: str = argparse.SUPPRESS,
                     help: str = "print krex's version and protocol, then exit") -> None:
            super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

        def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
            sys.stdout.write(version() + "\n")
            parser.exit(0)

    return Version


class _Subcommands:
    """The subcommands' parsers: `krex NAME --help` opens with the same line `krex --help` lists."""

    def __init__(self, subparsers: Any) -> None:
        self._subparsers = subparsers

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, description=kwargs.get("help"), **kwargs)
        return parser


def build_parser(version: Callable[[], str]) -> Parser:
    p = Parser(
        prog="krex",
        description="Run benchmark commands on a KREX runtime and inspect it.",
        epilog="exit status:\n" + "\n".join(f"  {status:<7} {meaning}" for status, meaning in EXIT_STATUS_TABLE),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_version_action(version))
    p.add_argument("--endpoint", help="control endpoint (default: KREX_ENDPOINT, else the run dir's socket)")
    p.add_argument("--run-dir", help="the runtime's run dir (default: KREX_RUN_DIR, else the system default)")
    p.add_argument("--cluster", metavar="ENDPOINT",
                   help="a cluster gateway's control endpoint (krex-cluster head): every command goes to the cluster")
    p.add_argument("--curve-client-key", metavar="FILE", help=f"tcp: your NAME.key_secret (default: {CLIENT_KEY_ENV})")
    p.add_argument("--curve-server-key", metavar="FILE", help=f"tcp: the runtime's public NAME.key (default: {SERVER_KEY_ENV})")
    sub = _Subcommands(p.add_subparsers(dest="verb", required=True, metavar="COMMAND"))
    js = [_json_option()]
    run = sub.add_parser("run", parents=js, help="run a command, stream its output, exit with its exit status")
    _command_options(run)
    submit = sub.add_parser("submit", parents=js, help=verbs.SUBMIT.summary)
    _command_options(submit)
    wait = sub.add_parser("wait", parents=js, help=verbs.WAIT.summary)
    wait.add_argument("id", help="the command's id (from krex submit)")
    status = sub.add_parser("status", parents=js, help=verbs.STATUS.summary)
    status.add_argument("--watch", type=float, nargs="?", const=1.0, metavar="S", help="redraw every S seconds (default 1)")
    for verb in verbs.VERBS.values():
        if verb.on_cli or verb.args:
            _verb_parser(sub, js, verb)
    eval_command.add_parser(sub, js)  # a command per candidate (cli/eval_command.py)
    _client_side_parsers(sub, js)
    return p


def _command_options(sp: argparse.ArgumentParser) -> None:
    """What `run` and `submit` take: where and how the command runs, then its argv."""
    sp.add_argument("--gpu", type=int, help="run on this GPU index (default: the least-loaded)")
    sp.add_argument("--gpus", metavar="N|I,J", default=None,
                    help="run on a set of GPUs: N of them (where N have a free slot) or these indices (0,1); "
                         "its regions cover the whole set (policy krex; process mode)")
    sp.add_argument("--timeout", type=float, metavar="S", help="wall-time limit in seconds (then exit status 124)")
    sp.add_argument("--label", default="", help="a name shown in status and the trace")
    sp.add_argument("--lease", action="store_true", help="run with the whole GPU leased to the command (policy krex)")
    sp.add_argument(
        "--mode", choices=submit_modes(), default=None,
        help="how it runs (default: the runtime's dispatcher.default_mode): process, its own process tree; "
        "forked, forked from the GPU's preloaded zygote; pooled, a Python entry point run in a warm context process; "
        "forwarded, its own process tree with its CUDA driver calls run in a warm context server "
        "(native programs; needs the runtime's forward.servers_per_gpu)",
    )
    sp.add_argument("--auto-region", action=argparse.BooleanOptionalAction, default=None,
                    help="run timing harnesses (do_bench, torch Timer, cupyx benchmark) in regions "
                         "(default: the runtime's regions.auto_region)")
    sp.add_argument("--auto-region-entry", action="append", default=[], metavar="MODULE:FUNC",
                    help="one more entry point to run in a region (module:function or module:Class.method)")
    sp.add_argument("--share", default="", metavar="KEY", help="fair-share key, dividing your own share (default: none, your share undivided)")
    sp.add_argument("--node-label", action="append", default=[], metavar="KEY=VALUE", dest="node_label",
                    help="run only on a node with this label (runtime.labels); repeat for more")
    sp.add_argument("--gpu-model", default=None, metavar="NAME", help="run on a GPU whose name contains NAME")
    sp.add_argument("--retries", type=int, default=None, metavar="N",
                    help="in a cluster: run it again on another node up to N times if its node is lost")
    sp.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...", help="the command and its arguments")


def _verb_parser(sub: _Subcommands, js: list[argparse.ArgumentParser], verb: verbs.Verb) -> None:
    """One verb of the table as a subcommand: its own arguments, and how long to wait for its reply."""
    sp = sub.add_parser(verb.name, parents=js, help=verb.summary, aliases=list(verb.aliases))
    sp.set_defaults(verb=verb.name)  # under an alias too
    for arg in verb.args:
        sp.add_argument(*arg.flags, **arg.options)
    sp.add_argument("--wait", type=float, default=verb.wait_s, metavar="S", help="give up waiting after S seconds")
    if verb is verbs.CANCEL:  # beside its ids, a selection of commands (cli/cancel.py)
        sp.add_argument("--label", help="the queued and running commands of this label, or a glob of "
                                        "labels ('bench-*')")
        sp.add_argument("--state", help="only those in this state: queued, running, or active (both: "
                                        "the default of a selection)")
        sp.add_argument("--all", action="store_true", help="every queued and running command")
        sp.add_argument("--yes", "-y", action="store_true",
                        help="cancel several without asking (needed where stdin is not a terminal)")
    if verb is verbs.LOGS:
        sp.add_argument("--follow", "-f", action="store_true",
                        help="then print what it writes until it ends")
        sp.add_argument("--stderr", action="store_true", help="only its stderr (default: stdout and stderr)")


def _client_side_parsers(sub: _Subcommands, js: list[argparse.ArgumentParser]) -> None:
    """The subcommands no runtime answers: bench, trace, keys, config, check-config, completion."""
    bench = sub.add_parser(
        "bench", help="the evaluation workload under each policy: run, report, list (krex bench --help)", add_help=False
    )
    bench.add_argument("external_args", nargs=argparse.REMAINDER, help="krex bench's own arguments (the krex-bench program's)")
    trace = sub.add_parser("trace", parents=js, help="summarise a trace file (or a cluster trace directory, per node): commands, regions and leases")
    trace.add_argument("file", help="a trace (the runtime's runtime.trace_path, JSON lines), or a directory of node traces")
    keys = sub.add_parser("keys", help="CURVE key pairs for tcp endpoints")
    keys_verbs = keys.add_subparsers(dest="keys_verb", required=True, metavar="ACTION")
    create = keys_verbs.add_parser(
        "create", parents=js, help="write DIR/NAME.key (public) and DIR/NAME.key_secret (owner only)"
    )
    create.add_argument("dir", help="the folder to write the pair into")
    create.add_argument("--name", default="client", help="file name of the pair (default: client)")
    config = sub.add_parser("config", help="print what a node is set up with: the default config, the systemd unit")
    config_verbs = config.add_subparsers(dest="config_verb", required=True, metavar="WHAT")
    config_verbs.add_parser("default", help="the default config, every key (krex config default > /etc/krex/krex.toml)")
    config_verbs.add_parser(
        "unit", help="the systemd unit, its paths this install's krex-runtime "
        "(krex config unit > /etc/systemd/system/krex-runtime.service)",
    )
    check = sub.add_parser(
        "check-config", parents=js,
        help="read a runtime's config file as krex-runtime would and say whether it is valid (exit 0), "
             "else what is wrong in one line (exit 125)",
    )
    check.add_argument("file", help="a krex-runtime config (TOML), e.g. /etc/krex/krex.toml")
    completion = sub.add_parser(
        "completion", parents=js,
        help="print the shell code that completes krex (e.g. eval \"$(krex completion bash)\")",
    )
    completion.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to complete in")
