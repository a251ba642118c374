"""What each `krex` subcommand does, over the Python API (krex_runtime.api).

With `--json` each prints exactly one JSON document on stdout: `run` and
`wait` the command's Result with its output inside (`stdout`, `stderr`),
nothing streamed; the others their reply. Without it, `run` and `wait`
stream the command's output to stdout and stderr as it comes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from krex_runtime.api import RequestFailed
from krex_runtime.api.results import Result, malformed
from krex_runtime.api.sync import Client, Handle
from krex_runtime.wire.printable import printable
from krex_runtime.wire.protocol import verbs
from krex_runtime.wire.protocol.envelope import EXIT_KREX_ERROR
from krex_runtime.wire.typed import ShapeError

# rich's tables and live display, and the trace reader, load only for the
# subcommands that draw them: `krex` starts once per command an agent submits.


class UsageError(Exception):
    """A command line that names no work (exit 125, like argparse's errors)."""


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


def replied(verb: verbs.Verb, body: Any) -> dict[str, Any]:
    """A reply as `krex` reads it (the verb's reply shape, wire/protocol/replies.py),
    or ProtocolError (bad_message) naming what does not fit: one line, exit 125."""
    try:
        return verb.read_reply(body)
    except ShapeError as exc:
        raise malformed(f"the reply to {verb.name}: {exc}") from None


class _Console(Console):
    def on_broken_pipe(self) -> None:
        raise BrokenPipeError  # main() ends quietly with 141, as for any other write (rich would exit 1)


def console() -> Console:
    """rich on stdout; a pipe gets plain text wide enough not to cut rows."""
    return _Console(width=None if sys.stdout.isatty() else 200, soft_wrap=False)


def command_argv(args: argparse.Namespace) -> list[str]:
    argv = args.argv[1:] if args.argv and args.argv[0] == "--" else args.argv
    if not argv:
        raise UsageError(f"no command given (krex {args.verb} -- CMD ARGS...)")
    return [str(arg) for arg in argv]


def check_usage(args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see, found before any runtime is asked."""
    if args.verb in ("run", "submit"):
        command_argv(args)
        node_labels(args)
    if args.cluster and args.endpoint and args.cluster != args.endpoint:
        raise UsageError("--cluster names the endpoint: give --cluster or --endpoint, not both")
    if args.verb == "status" and args.json and args.watch:
        raise UsageError("--watch redraws for a person; --json prints one document: use one of them")


def node_labels(args: argparse.Namespace) -> dict[str, str]:
    """--node-label KEY=VALUE, each one."""
    found = {}
    for text in args.node_label:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise UsageError(f"--node-label takes KEY=VALUE, not {text!r}")
        found[key] = value
    return found


def gpu_set(text: str | None) -> int | list[int] | None:
    """--gpus N (how many) or --gpus I,J (which)."""
    if text is None:
        return None
    words = [w.strip() for w in text.split(",")]
    if not all(w.isascii() and w.isdigit() for w in words):
        raise UsageError(f"--gpus takes a number of GPUs (2) or GPU indices (0,1), not {text!r}")
    if len(words) == 1 and "," not in text:
        return int(words[0])
    return [int(w) for w in words]


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {"gpu": args.gpu, "gpus": gpu_set(args.gpus), "mode": args.mode, "timeout": args.timeout, "label": args.label, "lease": args.lease,
            "auto_region": args.auto_region, "auto_region_entries": args.auto_region_entry, "share": args.share,
            "node_labels": node_labels(args), "gpu_model": args.gpu_model, "retries": args.retries}


def check_cluster(client: Client, endpoint: str) -> None:
    """`--cluster` must name a cluster gateway, whose hello says so: a single
    runtime would take the node-targeted verbs as its own."""
    hello = client.call("hello", {"client": "krex"})
    if not (isinstance(hello, dict) and hello.get("cluster")):
        raise RequestFailed("not_a_cluster", f"{endpoint} is a single runtime, not a cluster gateway (use --endpoint)")


def run_command(client: Client, args: argparse.Namespace) -> int:
    argv = command_argv(args)
    handle = client.submit(argv, **_options(args), on_output=None if args.json else Streamer())
    return _finish(client, handle, args.json, asked_auto_region=args.auto_region is True)


def wait_command(client: Client, args: argparse.Namespace) -> int:
    handle = client.attach(args.id, on_output=None if args.json else Streamer())
    return _finish(client, handle, args.json)


class Streamer:
    """Writes a followed command's output through; once a stream's reader has
    gone, drops the rest (the cancel that follows must not fail on it)."""

    def __init__(self) -> None:
        self.closed = False

    def __call__(self, stream: str, text: str) -> None:
        if self.closed:
            return
        out = sys.stdout if stream == "stdout" else sys.stderr
        try:
            out.write(text)
            out.flush()
        except BrokenPipeError:
            self.closed = True
            raise


def _finish(client: Client, handle: Handle, as_json: bool, asked_auto_region: bool = False) -> int:
    """Wait for the command; Ctrl-C (or a closed stdout) cancels it, and we
    still report how it ended."""
    try:
        result = _wait(handle)
    except BrokenPipeError:  # nobody reads its output any more: end it, as a pipeline would
        _cancel_quietly(handle)
        raise
    if as_json:
        emit_json(result.to_dict())
    _say_end(result, asked_auto_region)
    return result.exit_status


def _wait(handle: Handle) -> Result:
    while True:
        try:
            return handle.wait()
        except KeyboardInterrupt:
            print(f"\nkrex: cancelling {printable(handle.id)}", file=sys.stderr)
            _cancel_quietly(handle)


def _cancel_quietly(handle: Handle) -> None:
    try:
        handle.cancel()
    except Exception as exc:  # the runtime may be gone; the caller reports how it ended
        print(f"krex: could not cancel {printable(handle.id)}: {printable(exc)}", file=sys.stderr)


def _say_end(result: Result, asked_auto_region: bool = False) -> None:
    name = printable(result.id)
    if asked_auto_region and not result.auto_regions and (result.exit_code is not None or result.signal):
        print(f"krex: warning: {name}: --auto-region wrapped nothing: it called no timing harness KREX knows "
              "(do_bench, torch Timer, cupyx benchmark; name yours with --auto-region-entry MODULE:FUNC), "
              "so no timing of it ran in a region", file=sys.stderr)
    if result.unprotected_timings:
        print(f"krex: warning: {name} took {result.unprotected_timings} CUDA-event timing(s) "
              "outside a region: those measurements are not protected", file=sys.stderr)
    if result.untracked_timings:
        print(f"krex: warning: {name} took {result.untracked_timings} CUDA-event timing(s) the interception "
              "library could not track (too many live events): not known to be protected", file=sys.stderr)
    integrity = _integrity_line(result)
    if integrity:
        print(f"krex: {'warning: ' if 'flagged' in integrity else ''}{name}: {printable(integrity)}", file=sys.stderr)
    if any(result.output_lost.values()):
        lost = ", ".join(f"{n} bytes of {stream}" for stream, n in sorted(result.output_lost.items()) if n)
        print(f"krex: warning: {name}: its output files lost {printable(lost)} ({printable(result.output_error)})",
              file=sys.stderr)
    if result.reason or result.state not in ("finished", "failed") or result.exit_code is None:
        print(f"krex: {name} {printable(result.state)}: {printable(result.reason)}".rstrip(": "), file=sys.stderr)


def _integrity_line(result: Result) -> str:
    """Its regions' measurement integrity in one line (docs/integrity.md); "" when none timed a window."""
    records = [r.integrity for r in result.regions if r.integrity]
    windows = sum(int(r.get("windows") or 0) for r in records)
    flags: dict[str, int] = {}
    for r in records:
        for name, f in (r.get("flags") or {}).items():
            flags[name] = flags.get(name, 0) + int(f.get("count") or 0)
    if not flags:
        return f"integrity: clean ({windows} timed window{'' if windows == 1 else 's'})" if windows else ""
    flagged = sum(1 for r in records if r.get("flags"))
    named = ", ".join(f"{name} {n}" for name, n in flags.items())
    return (f"integrity: flagged in {flagged} of {len(records)} region(s): {named} ({windows} timed windows); "
            "see the regions' integrity records (--json)")


def submit_command(client: Client, args: argparse.Namespace) -> int:
    reply = client.enqueue(command_argv(args), **_options(args))  # nobody follows it here
    if args.json:
        emit_json(reply)
    else:
        print(printable(replied(verbs.SUBMIT, reply)["id"]))
    return 0


def status_command(client: Client, args: argparse.Namespace) -> int:
    if args.json:
        emit_json(client.call("status"))
        return 0
    from rich.live import Live

    from krex_runtime.cli.views import status_view

    out = console()
    if not args.watch:
        out.print(status_view(client.status(), width=out.width))
        return 0
    if not out.is_terminal:  # a pipe or a file: each frame whole, as it is drawn, a blank line between
        while True:
            out.print(status_view(client.status(), width=out.width))
            out.print()
            sys.stdout.flush()
            time.sleep(args.watch)
    # In place, not on the alternate screen: the last frame stays on the terminal after Ctrl-C.
    with Live(status_view(client.status(), width=out.width), console=out, auto_refresh=False) as live:
        while True:
            time.sleep(args.watch)
            live.update(status_view(client.status(), width=out.width), refresh=True)


def verb_command(client: Client, args: argparse.Namespace) -> int:
    """A plain verb of the table: its args make its body, its `says` the output."""
    verb = verbs.VERBS[args.verb]
    body = {f.name: getattr(args, f.name) for f in dataclasses.fields(verb.body) if hasattr(args, f.name)}
    reply = client.call(verb.name, body, timeout=args.wait)
    assert verb.says is not None
    if args.json:
        emit_json(reply)
    else:
        print(verb.says(replied(verb, reply)))
    return 0


def show_command(client: Client, args: argparse.Namespace) -> int:
    """`krex show ID`: the command as it is now, without waiting for it."""
    result = client.show(args.id)  # checked: a malformed record is a ProtocolError, one line
    if args.json:
        emit_json(dict(result.record))
        return 0
    from krex_runtime.cli.views import command_view

    console().print(command_view(result))
    return 0


# How often `krex logs --follow` asks for more.
FOLLOW_POLL_S = 0.25


def logs_command(client: Client, args: argparse.Namespace) -> int:
    """A command's output from its files, stdout to stdout and stderr to
    stderr; with --follow, then the rest as it is written, until it ends."""
    streams = ["stderr"] if args.stderr else ["stdout", "stderr"]
    offsets: dict[str, int] = {}
    kept: dict[str, list[str]] = {s: [] for s in streams}
    tail = args.tail
    while True:
        body = {"id": args.id, "streams": streams, "tail": tail, "offsets": offsets}
        reply = replied(verbs.LOGS, client.call("logs", body, timeout=args.wait))
        tail = None  # the tail once; then everything after it
        for stream, part in reply["output"].items():
            offsets[stream] = part["next"]
            if args.json:
                kept[stream].append(part["data"])
            elif part["data"]:
                out = sys.stdout if stream == "stdout" else sys.stderr
                out.write(part["data"])
                out.flush()
        if any(part["more"] for part in reply["output"].values()):
            continue
        if reply["ended"] and len(reply["missing"]) == len(streams):
            return fail(args, "no_output", f"{args.id} {reply['state']}: its output files are gone")
        if not args.follow or reply["ended"]:
            break
        time.sleep(FOLLOW_POLL_S)
    if args.json:
        emit_json({"id": reply["id"], "state": reply["state"]} | {s: "".join(kept[s]) for s in streams})
    elif reply["state"] == "queued":
        print(f"krex: {printable(reply['id'])} is queued: no output yet (--follow waits for it)", file=sys.stderr)
    return 0


# Subcommands that talk to a runtime, beyond the table's plain verbs.
WITH_RUNTIME = {
    "run": run_command,
    "submit": submit_command,
    "wait": wait_command,
    "status": status_command,
    "logs": logs_command,
    "show": show_command,
}


def trace_command(args: argparse.Namespace) -> int:
    from krex_runtime.cli.views import cluster_trace_view, trace_view
    from krex_runtime.wire.trace.cluster import is_cluster_trace, read_cluster_trace, summarize_cluster
    from krex_runtime.wire.trace.jsonl import TraceError, read_trace
    from krex_runtime.wire.trace.summary import summarize

    path = Path(args.file)
    cluster = is_cluster_trace(path)  # a directory: one trace per node (docs/trace-format.md)
    try:
        summary = summarize_cluster(read_cluster_trace(path)) if cluster else summarize(read_trace(path))
    except TraceError as exc:
        return fail(args, "bad_trace", str(exc))
    if args.json:
        emit_json(summary)
    else:
        console().print(cluster_trace_view(summary) if cluster else trace_view(summary))
    return 0


def keys_command(args: argparse.Namespace) -> int:
    from krex_runtime.service import curve  # the key files' format is the runtime's

    try:
        public, secret = curve.create_key_pair(Path(args.dir), args.name)
    except (curve.CurveError, OSError) as exc:
        return fail(args, "keys", str(exc))
    if args.json:
        emit_json({"public": str(public), "secret": str(secret)})
        return 0
    print(f"public key {public} (give it to the runtime: runtime.curve_clients, or to clients: KREX_CURVE_SERVER_KEY)")
    print(f"secret key {secret} (keep it: runtime.curve_server_key, or KREX_CURVE_CLIENT_KEY)")
    return 0


def config_command(args: argparse.Namespace) -> int:
    """`krex config default|unit`: the files the package ships (node/shipped.py)."""
    import shutil

    from krex_runtime.node import shipped

    try:
        if args.config_verb == "default":
            text = shipped.shipped_text("default.toml")
        else:
            beside = Path(sys.argv[0]).absolute().parent / "krex-runtime"  # this install's, beside krex
            text = shipped.unit_text(str(beside) if beside.is_file() else shutil.which("krex-runtime"))
    except FileNotFoundError as exc:
        return fail(args, "not_shipped", str(exc))
    sys.stdout.write(text)
    return 0


def check_config_command(args: argparse.Namespace) -> int:
    """`krex check-config FILE`: the file read as `krex-runtime --check-config` reads it."""
    from krex_runtime.node.config import problem_of_file

    problem = problem_of_file(args.file)
    if problem:
        return fail(args, "invalid_config", problem)
    if args.json:
        emit_json({"file": args.file, "valid": True})
    else:
        print(f"{args.file}: valid")
    return 0


def completion_command(args: argparse.Namespace) -> int:
    import argcomplete

    script = argcomplete.shellcode(["krex"], shell=args.shell)
    if args.json:
        emit_json({"shell": args.shell, "script": script})
    else:
        sys.stdout.write(script)
    return 0


def fail(args: argparse.Namespace, code: str, reason: str, show_code: bool = False) -> int:
    """A KREX failure: one line on stderr (the runtime's error code after a
    refusal) and, with --json, the error as the document; exit 125."""
    print(f"krex: {printable(reason)}" + (f" [{printable(code)}]" if show_code else ""), file=sys.stderr)
    if getattr(args, "json", False):
        emit_json({"error": {"code": code, "reason": reason}})
    return EXIT_KREX_ERROR
