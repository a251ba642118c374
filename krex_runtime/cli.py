"""`krex`: submit commands to this node's runtime, wait for them, inspect it.

Exit status of `run` and `wait`: the command's own exit code; 128+N when a
signal N ended it; 124 when it ran past its time limit; 125 when KREX itself
failed (no runtime, request refused).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from krex_runtime.service import curve
from krex_runtime.wire import protocol, verbs
from krex_runtime.wire.control_client import (
    CLIENT_KEY_ENV,
    SERVER_KEY_ENV,
    ControlClient,
    RequestFailed,
    RuntimeUnavailable,
    how_to_start,
)
from krex_runtime.wire.protocol import EXIT_KREX_ERROR
from krex_runtime.wire.trace import TraceError, read_trace, summarize


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="krex", description="Run benchmark commands on this node's KREX runtime.")
    p.add_argument("--endpoint", help="control endpoint (default: KREX_ENDPOINT, else the run dir's socket)")
    p.add_argument("--run-dir", help="the runtime's run dir (default: KREX_RUN_DIR, else the system default)")
    p.add_argument("--curve-client-key", metavar="FILE", help=f"tcp: your NAME.key_secret (default: {CLIENT_KEY_ENV})")
    p.add_argument("--curve-server-key", metavar="FILE", help=f"tcp: the runtime's public NAME.key (default: {SERVER_KEY_ENV})")
    sub = p.add_subparsers(dest="verb", required=True, metavar="COMMAND")

    def command_options(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--gpu", type=int, help="run on this GPU index (default: the least-loaded)")
        sp.add_argument("--timeout", type=float, metavar="S", help="wall-time limit in seconds")
        sp.add_argument("--label", default="", help="a name shown in status and the trace")
        sp.add_argument("--lease", action="store_true", help="run with the whole GPU leased to the command (policy krex)")
        sp.add_argument(
            "--mode",
            choices=["process", "pooled"],
            default="process",
            help="process: its own process tree; pooled: a Python entry point run in a warm context process",
        )
        sp.add_argument("--auto-region", action=argparse.BooleanOptionalAction, default=None,
                        help="run timing harnesses (do_bench, torch Timer, cupyx benchmark) in regions "
                             "(default: the runtime's regions.auto_region)")
        sp.add_argument("--auto-region-entry", action="append", default=[], metavar="MODULE:FUNC",
                        help="one more entry point to run in a region (module:function or module:Class.method)")
        sp.add_argument("--share", default="", metavar="KEY", help="fair-share key (default: your user name)")
        sp.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")

    run = sub.add_parser("run", help="run a command, stream its output, exit with its exit code")
    command_options(run)
    run.add_argument("--json", action="store_true", help="end with one JSON result record on stdout")
    submit = sub.add_parser("submit", help=verbs.SUBMIT.summary)
    command_options(submit)
    wait = sub.add_parser("wait", help=verbs.WAIT.summary)
    wait.add_argument("id")
    wait.add_argument("--json", action="store_true", help="print the result record instead of the output")
    status = sub.add_parser("status", help=verbs.STATUS.summary)
    status.add_argument("--json", action="store_true")
    status.add_argument("--watch", type=float, nargs="?", const=1.0, metavar="S", help="refresh every S seconds")
    for verb in verbs.VERBS.values():
        if verb.on_cli:
            sp = sub.add_parser(verb.name, help=verb.summary)
            for arg in verb.args:
                sp.add_argument(*arg.flags, **arg.options)
            sp.add_argument("--wait", type=float, default=verb.wait_s, metavar="S", help="give up waiting after S seconds")
    bench = sub.add_parser("bench", help="run the evaluation workload under each policy (krex bench --help)", add_help=False)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    trace = sub.add_parser("trace", help="summarise a trace file")
    trace.add_argument("file")
    trace.add_argument("--json", action="store_true")
    keys = sub.add_parser("keys", help="CURVE key pairs for tcp endpoints")
    keys_verbs = keys.add_subparsers(dest="keys_verb", required=True, metavar="ACTION")
    create = keys_verbs.add_parser("create", help="write DIR/NAME.key (public) and DIR/NAME.key_secret (owner only)")
    create.add_argument("dir")
    create.add_argument("--name", default="client", help="file name of the pair (default: client)")
    return p


def bench_command(argv: list[str]) -> int:
    from krex_bench.cli import main as bench_main  # the evaluation is not part of the runtime

    return bench_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # its own options, --help included, belong to it
        return bench_command(argv[1:])
    args = build_parser().parse_args(argv)
    if args.run_dir:
        os.environ["KREX_RUN_DIR"] = args.run_dir
    if args.curve_client_key:
        os.environ[CLIENT_KEY_ENV] = args.curve_client_key
    if args.curve_server_key:
        os.environ[SERVER_KEY_ENV] = args.curve_server_key
    if args.verb == "trace":
        return trace_command(args)
    if args.verb == "bench":
        return bench_command(args.bench_args)
    if args.verb == "keys":
        return keys_command(args)
    try:
        with ControlClient(args.endpoint) as client:
            return LOOPS.get(args.verb, verb_command)(client, args)
    except RuntimeUnavailable as exc:
        print(f"krex: {exc}; {how_to_start()}", file=sys.stderr)
        return EXIT_KREX_ERROR
    except (RequestFailed, protocol.ProtocolError) as exc:  # ProtocolError: a reply that is not one
        print(f"krex: {exc.reason} [{exc.code}]", file=sys.stderr)
        return EXIT_KREX_ERROR
    except KeyboardInterrupt:
        return 130


def _submit_body(args: argparse.Namespace, attach: bool) -> dict[str, Any]:
    argv = args.argv[1:] if args.argv and args.argv[0] == "--" else args.argv
    if not argv:
        raise SystemExit("krex: no command given (krex run -- CMD ARGS...)")
    return {
        "argv": argv,
        "gpu": args.gpu,
        "timeout_s": args.timeout,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "label": args.label,
        "attach": attach,
        "lease": args.lease,
        "mode": args.mode,
        "auto_region": args.auto_region,
        "auto_region_entries": args.auto_region_entry,
        "share": args.share,
    }


def run_command(client: ControlClient, args: argparse.Namespace) -> int:
    return _follow(client, "submit", _submit_body(args, attach=True), args.json)


def wait_command(client: ControlClient, args: argparse.Namespace) -> int:
    return _follow(client, "wait", {"id": args.id, "attach": True}, args.json, show_output=not args.json)


def _follow(client: ControlClient, type_: str, body: dict[str, Any], as_json: bool, show_output: bool = True) -> int:
    """Stream a command's output; on Ctrl-C cancel it and report how it ended."""
    command_id: str | None = None
    outputs = {"stdout": sys.stdout, "stderr": sys.stderr}
    stream = client.follow(type_, body)
    while True:
        try:
            msg = next(stream)
        except KeyboardInterrupt:
            if command_id is not None:
                client.send("cancel", {"id": command_id})
                print(f"\nkrex: cancelling {command_id}", file=sys.stderr)
            continue
        except StopIteration:
            return EXIT_KREX_ERROR
        if msg["type"] == "reply":
            command_id = msg["body"]["id"]
        elif msg["type"] == protocol.PUSH_OUTPUT and show_output:
            out = outputs[msg["body"]["stream"]]
            out.write(msg["body"]["data"])
            out.flush()
        elif msg["type"] == protocol.PUSH_RESULT:
            result = msg["body"]
            if as_json:
                sys.stdout.write(json.dumps(result) + "\n")
            if result.get("unprotected_timings"):
                print(f"krex: warning: {result['id']} took {result['unprotected_timings']} CUDA-event timing(s) "
                      "outside a region: those measurements are not protected", file=sys.stderr)
            if result["state"] != "finished" or result.get("reason"):
                print(f"krex: {result['id']} {result['state']}: {result.get('reason', '')}".rstrip(": "), file=sys.stderr)
            return protocol.exit_status_of(result)


def submit_command(client: ControlClient, args: argparse.Namespace) -> int:
    reply = client.call("submit", _submit_body(args, attach=False))
    print(reply["id"])
    return 0


def status_command(client: ControlClient, args: argparse.Namespace) -> int:
    while True:
        status = client.call("status")
        if args.json:
            print(json.dumps(status))
        else:
            if args.watch:
                sys.stdout.write("\x1b[H\x1b[2J")
            print(format_status(status))
        if not args.watch:
            return 0
        time.sleep(args.watch)


def format_status(status: dict[str, Any]) -> str:
    flags = [f for f, on in (("PAUSED", status["paused"]), ("STOPPING", status["stopping"])) if on]
    totals = status["totals"]
    lines = [
        f"node {status['node']}  policy {status['policy']}  pid {status['pid']}  "
        f"up {status['uptime_s']:.0f}s  queued {status['queued']}  {' '.join(flags)}".rstrip(),
        "submitted {s}  finished {f}  timeout {t}  cancelled {c}  failed {x}".format(
            s=totals.get("submitted", 0),
            f=totals.get("finished", 0),
            t=totals.get("timeout", 0),
            c=totals.get("cancelled", 0),
            x=totals.get("failed", 0),
        ),
        "",
        f"{'GPU':<4} {'NAME':<22} {'RUN':>4} {'SLOT':>4} {'QUEUE':>5} {'POOL':>5}  {'REGION':<14} {'RQ':>3} {'FRZ':>3} "
        f"{'GRANTED':>7} {'ENTER ms':>8}  STATE",
    ]
    now = time.time()
    for g in status["gpus"]:
        name = g["name"] + (" (sim)" if g["simulated"] and "simulated" not in g["name"] else "")
        holder = g.get("region_holder")
        if holder is None:
            region = "-"
        elif g.get("region_kind") == "lease":
            region = f"lease {now - (g.get('region_since') or now):.0f}s"
        else:
            region = f"t{holder} {now - (g.get('region_since') or now):.1f}s"
        enter = g.get("last_region", {}).get("enter_s")
        state = "paused" if g["paused"] else "leased" if g.get("leased") else "open"
        pool = g.get("pool") or {}
        pool_text = f"{pool.get('idle', 0)}/{pool['size']}" if pool.get("size") else "-"
        lines.append(
            f"{g['index']:<4} {name[:22]:<22} {len(g['running']):>4} {g['slots']:>4} {g['queued']:>5} {pool_text:>5}  "
            f"{region:<14} {g.get('region_queue', 0):>3} {len(g.get('frozen', [])):>3} "
            f"{g.get('regions_granted', 0):>7} {enter * 1000 if enter is not None else float('nan'):>8.1f}  {state}"
        )
    foreign = [f"GPU {g['index']}: pid {', '.join(map(str, g['foreign_processes']))}"
               for g in status["gpus"] if g.get("foreign_processes")]
    if foreign:
        lines.append("foreign GPU processes (not started by this runtime): " + "; ".join(foreign))
    return "\n".join(lines)


def trace_command(args: argparse.Namespace) -> int:
    try:
        summary = summarize(read_trace(Path(args.file)))
    except TraceError as exc:
        print(f"krex: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"trace of {summary['node']}: policy {summary['policy']}, {summary['gpus']} GPU(s)")
    print(f"{summary['events']} events over {summary['span_s']:.1f} s")
    for key, value in sorted(summary["totals"].items()):
        print(f"  {key:<10} {value}")
    for name in ("queue_wait_s", "run_s"):
        q = summary[name]
        if q:
            print(f"  {name:<13} n={q['n']} p50={q['p50']:.3f} p95={q['p95']:.3f} max={q['max']:.3f}")
    print("  peak running per GPU: " + ", ".join(f"{k}:{v}" for k, v in summary["peak_running_per_gpu"].items()))
    if summary["unfinished"]:
        print(f"  {summary['unfinished']} command(s) started but never finished in this trace")
    return 0


def keys_command(args: argparse.Namespace) -> int:
    try:
        public, secret = curve.create_key_pair(Path(args.dir), args.name)
    except (curve.CurveError, OSError) as exc:
        print(f"krex: {exc}", file=sys.stderr)
        return 1
    print(f"public key {public} (give it to the runtime: runtime.curve_clients, or to clients: {SERVER_KEY_ENV})")
    print(f"secret key {secret} (keep it: runtime.curve_server_key, or {CLIENT_KEY_ENV})")
    return 0


# Verbs whose `krex` command does more than send a body and print the reply.
LOOPS = {
    "run": run_command,
    "submit": submit_command,
    "wait": wait_command,
    "status": status_command,
}


def verb_command(client: ControlClient, args: argparse.Namespace) -> int:
    """A plain verb of the table: its args make its body, its `says` the output."""
    verb = verbs.VERBS[args.verb]
    body = {f.name: getattr(args, f.name) for f in dataclasses.fields(verb.body) if hasattr(args, f.name)}
    reply = client.call(verb.name, body, timeout_s=args.wait)
    assert verb.says is not None
    print(verb.says(reply))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
