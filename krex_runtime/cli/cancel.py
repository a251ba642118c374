"""`krex cancel`: one command, several by id, or a selection (`--label`,
`--state`, `--all`) of the queued and running ones, found with `ls`.

More than one id, or any selection, is confirmed first: asked on a terminal
(`cancel 12 commands? [y/N]`, the commands named above it), skipped with
`--yes`, and refused in one line when stdin is not a terminal to ask on.
Each command's line says how it ended: cancelled, or had already ended (not
an error); an id the runtime does not know is an error (exit 125), said
after the others are cancelled.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from krex_runtime.api import RequestFailed
from krex_runtime.api.sync import Client
from krex_runtime.cli.subcommands import UsageError, emit_json, fail, replied
from krex_runtime.wire.printable import printable
from krex_runtime.wire.protocol import history, verbs
from krex_runtime.wire.protocol.envelope import EXIT_KREX_ERROR

# The states a selection may name: only these can still be cancelled.
CANCELLABLE = ("queued", "running")
# How many of the chosen commands the question names above itself.
NAMED_AT_MOST = 10


def check_usage(args: argparse.Namespace) -> None:
    """What argparse cannot see of a cancel's ids and selection, before any runtime is asked."""
    selecting = args.label is not None or args.state is not None
    if args.id and (selecting or args.all):
        raise UsageError("give command ids or a selection (--label, --state, --all), not both")
    if args.all and selecting:
        raise UsageError("--all takes every queued and running command: give it alone, or --label/--state instead")
    if not (args.id or selecting or args.all):
        raise UsageError("no command given (krex cancel ID..., or --label L, --state S, --all)")
    if args.state is not None:
        try:
            states = history.states_of(args.state) or set()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        ended = sorted(states - set(CANCELLABLE))
        if ended:
            raise UsageError(f"--state {args.state}: only queued and running commands can be cancelled, "
                             f"not {', '.join(ended)} ones")


def cancel_command(client: Client, args: argparse.Namespace) -> int:
    if len(args.id) == 1:  # one id, as the verb always was: nothing to ask, its reply the document
        reply = replied(verbs.CANCEL, client.call("cancel", {"id": args.id[0]}, timeout=args.wait))
        if args.json:
            emit_json(reply)
        else:
            print(_line(reply["id"], reply["state"]))
        return 0
    chosen = [{"id": i} for i in dict.fromkeys(args.id)] or _selected(client, args)
    if not chosen:
        if args.json:
            emit_json({"commands": []})
        print("krex: no queued or running command matches: nothing cancelled", file=sys.stderr)
        return 0
    if not args.yes:
        refused = _unconfirmed(args, chosen)
        if refused is not None:
            return refused
    return _report(args, client.cancel_many([c["id"] for c in chosen]))


def _selected(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The queued and running commands the selection names, oldest first, as `ls` lists them."""
    body = {"state": args.state or "active", "label": args.label}
    rows = replied(verbs.LIST, client.call("ls", body, timeout=args.wait))["commands"]
    return [r for r in rows if r["state"] in CANCELLABLE]  # whatever the runtime's filter let through


def _unconfirmed(args: argparse.Namespace, chosen: list[dict[str, Any]]) -> int | None:
    """None to go on; else the exit status, after asking (or finding no terminal to ask on)."""
    what = f"cancel {len(chosen)} command{'' if len(chosen) == 1 else 's'}"
    if not sys.stdin.isatty():
        return fail(args, "not_confirmed", f"{what}: pass --yes to confirm (stdin is not a terminal to ask on)")
    for row in chosen[:NAMED_AT_MOST]:
        about = [row.get("state"), row.get("label") or "-", " ".join(row.get("argv") or ())[:60]] if "state" in row else []
        print("  " + "  ".join(printable(cell) for cell in [row["id"], *about]), file=sys.stderr)
    if len(chosen) > NAMED_AT_MOST:
        print(f"  ... and {len(chosen) - NAMED_AT_MOST} more", file=sys.stderr)
    print(f"{what}? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return None
    print("krex: nothing cancelled", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace, states: dict[str, str | RequestFailed]) -> int:
    """A line per command (or one document); an id the runtime refused makes the exit status 125."""
    if args.json:
        emit_json({"commands": [
            {"id": i, "error": {"code": s.code, "reason": s.reason}} if isinstance(s, RequestFailed)
            else {"id": i, "state": s} for i, s in states.items()
        ]})
    refused = False
    for command_id, state in states.items():
        if isinstance(state, RequestFailed):
            refused = True
            print(f"krex: {printable(state.reason)} [{printable(state.code)}]", file=sys.stderr)
        elif not args.json:
            print(_line(command_id, state))
    return EXIT_KREX_ERROR if refused else 0


def _line(command_id: str, state: str) -> str:
    """A command's line, in the verb's own wording (wire/protocol/verbs.py)."""
    says = verbs.CANCEL.says
    assert says is not None
    return says({"id": command_id, "state": state})
