"""One table of the control protocol's verbs: each verb's body, whether it
changes state, its `krex` command line and how `krex` prints its reply, and
what the console's confirm dialog says of it.

Everything that lists verbs derives from this table: the protocol's body
registry (protocol.REQUESTS), the set refused on the read-only socket and to
tenants (CHANGING), the CLI's subcommands, the console's actions. The runtime
keys its handlers by these verbs (krex_runtime/service/handlers.py) and
refuses to start if a verb has no handler or a handler no verb.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.wire.printable import printable
from krex_runtime.wire.protocol import history, replies
from krex_runtime.wire.protocol.bodies import (
    CommandRef,
    EmptyBody,
    GpuRef,
    HelloBody,
    LeaseBody,
    ListBody,
    LogsBody,
    PauseBody,
    RecycleBody,
    SnapshotBody,
    SubmitBody,
    WaitBody,
)
from krex_runtime.wire.typed import from_dict, to_dict


@dataclass(frozen=True)
class Arg:
    """One argument of the verb's `krex` subcommand (argparse's add_argument).
    Its dest is the body field it fills."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


# How long a client waits for a reply, unless the verb says it takes longer.
REPLY_WAIT_S = 10.0


@dataclass(frozen=True)
class Verb:
    name: str  # the request type on the wire
    body: type  # the dataclass its body must fit
    changes_state: bool  # refused on the read-only socket and to tenants
    summary: str  # one line: `krex --help` and docs/protocol.md
    args: tuple[Arg, ...] = ()  # `krex NAME ...`; every dest is a body field
    says: Callable[[dict[str, Any]], str] | None = None  # `krex NAME` prints this of the reply
    confirm: str = ""  # what the console's confirm dialog explains; "" when the console does not offer it
    wait_s: float = REPLY_WAIT_S  # how long a client waits for the reply
    aliases: tuple[str, ...] = ()  # other names of its `krex` subcommand
    reply: type | None = None  # the shape of its reply that `krex` reads (wire/protocol/replies.py)

    @property
    def on_cli(self) -> bool:
        """A plain `krex NAME`: send the body its args make, print what `says` says."""
        return self.says is not None

    def read_reply(self, body: Any) -> dict[str, Any]:
        """The reply's body as its shape reads it (keys it lacks filled with
        their defaults, keys it does not know left out); ShapeError when it
        does not fit. A verb without a shape: the body as it came."""
        if self.reply is None:
            return dict(body) if isinstance(body, dict) else {}
        shaped: dict[str, Any] = to_dict(from_dict(self.reply, body, ignore_unknown=True))
        return shaped


def _cancelled(reply: dict[str, Any]) -> str:
    """A command that had ended before the cancel is said so, not as an error."""
    name, state = printable(reply["id"]), reply["state"]
    if state in history.FINAL_STATES and state != "cancelled":
        return f"{name}: had already ended ({printable(state)})"
    if state not in history.FINAL_STATES:
        return f"{name}: {printable(state)} (cancel asked; it has not ended yet)"
    return f"{name}: cancelled"


def _paused(reply: dict[str, Any]) -> str:
    return f"paused admission on {_scope(reply['paused'])}"


def _resumed(reply: dict[str, Any]) -> str:
    return f"resumed admission on {_scope(reply['resumed'])}"


def _scope(target: Any) -> str:
    return "the node" if target == "node" else f"GPU {printable(target)}"


def _leased(reply: dict[str, Any]) -> str:
    until = time.strftime("%H:%M:%S", time.localtime(reply["expires_at"]))
    return f"leased GPU {reply['gpu']} until {until} (krex release {reply['gpu']} to end it)"


def _recycling(reply: dict[str, Any]) -> str:
    when = "now" if reply["now"] else "after their current command"
    return f"recycling {reply['workers']} context process(es) of GPU {reply['gpu']} {when}"


# A lease waits for the GPU's region queue; give it time before calling it lost.
LEASE_WAIT_S = 600.0

_GPU = Arg(("gpu",), {"type": int, "help": "the GPU's index (krex status lists them)"})
_GPU_SCOPE = Arg(("--gpu",), {"type": int, "help": "only this GPU (default: the whole node)"})
# Against a cluster gateway (`krex --cluster`), the node the verb is for.
_NODE = Arg(("--node",), {"default": None, "help": "the node of a cluster (krex --cluster ... status lists them)"})

HELLO = Verb("hello", HelloBody, False, "the runtime's protocol version, node, policy and GPUs")
STATUS = Verb("status", EmptyBody, False, "show the node: GPUs, queues, running commands")
SNAPSHOT = Verb("snapshot", SnapshotBody, False, "the node state as the reducer folds it, with its sequence number")
SUBMIT = Verb("submit", SubmitBody, True, "queue a command and print its id", reply=replies.CommandStateReply)
WAIT = Verb("wait", WaitBody, False, "wait for a command, stream its output, exit with its exit code")
CANCEL = Verb(
    "cancel", CommandRef, True, "cancel queued or running commands: by id, or those of a label or state, or all",
    args=(Arg(("id",), {"nargs": "*", "metavar": "ID",
                        "help": "the commands' ids (from krex submit, ls, status or the console)"}),),
    says=_cancelled,
    confirm="Ends its whole process tree.",
    reply=replies.CommandStateReply,
)
PAUSE = Verb(
    "pause", PauseBody, True, "stop admitting commands",
    args=(_GPU_SCOPE, _NODE), says=_paused,
    confirm="No new command starts on this GPU; running ones continue.",
    reply=replies.PausedReply,
)
RESUME = Verb(
    "resume", PauseBody, True, "admit commands again",
    args=(_GPU_SCOPE, _NODE), says=_resumed,
    confirm="Queued commands may start on this GPU again.",
    reply=replies.ResumedReply,
)
LEASE = Verb(
    "lease", LeaseBody, True, "take a whole GPU: wait for its region, gate, drain and freeze its tenants",
    args=(
        _GPU,
        Arg(("--ttl",), {"dest": "ttl_s", "type": float, "metavar": "S",
                         "help": "release by itself after S seconds (default: config)"}),
        _NODE,
    ),
    says=_leased,
    confirm="Waits for the GPU's region, then gates, drains and freezes its tenants until released "
    "or the lease expires (regions.lease_ttl_s).",
    wait_s=LEASE_WAIT_S,
    reply=replies.LeaseReply,
)
RELEASE = Verb(
    "release", GpuRef, True, "end a lease: thaw, reopen and admit again",
    args=(_GPU, _NODE),
    says=lambda reply: f"released GPU {reply['gpu']}",
    confirm="Ends the operator's lease: thaw, reopen the gate, admit again.",
    reply=replies.ReleaseReply,
)
RECYCLE = Verb(
    "recycle", RecycleBody, True, "replace a GPU's context processes after their current command",
    args=(
        _GPU,
        Arg(("--now",), {"action": "store_true", "help": "at once: busy ones are killed and their commands fail"}),
        _NODE,
    ),
    says=_recycling,
    confirm="Replaces the pooled context processes of this GPU now.",
    reply=replies.RecycleReply,
)

def _when(text: str) -> float:
    try:
        return history.parse_when(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


LIST = Verb(
    "ls", ListBody, False, "list the commands the runtime remembers: state, user and share, label, times",
    args=(
        Arg(("--state",), {"help": "only these states: queued, running, finished, failed, cancelled, timeout, "
                                   "comma-separated, or active (queued,running), ended (the others)"}),
        Arg(("--label",), {"help": "only this label, or a glob of labels ('bench-*')"}),
        Arg(("--since",), {"type": _when, "metavar": "WHEN",
                           "help": "only those submitted since WHEN: an age (10m, 2h, 1d, now-1h), today, "
                                   "yesterday, unix seconds or an ISO time"}),
        Arg(("--until",), {"type": _when, "metavar": "WHEN", "help": "only those submitted until WHEN (as --since)"}),
        Arg(("--user",), {"help": "only those this user submitted (key:NAME for a tcp client's key)"}),
    ),
    says=history.listed_table,
    aliases=("history",),
    reply=replies.ListReply,
)
LOGS = Verb(
    "logs", LogsBody, False, "print a command's output so far (--follow: and the rest until it ends)",
    args=(
        Arg(("id",), {"help": "the command's id (from krex submit, ls or status)"}),
        Arg(("--tail",), {"type": int, "metavar": "N", "help": "only its last N lines (of each stream)"}),
    ),
    reply=replies.LogsReply,
)
SHOW = Verb(
    "show", CommandRef, False,
    "one command now, without waiting: state, exit, label, mode, GPUs, times, queue wait, its regions",
    args=(Arg(("id",), {"help": "the command's id (from krex submit, ls or status)"}),),
)

# Verbs whose body names a `node`: a cluster gateway sends them to that node.
NODE_TARGETED: frozenset[str] = frozenset({"pause", "resume", "lease", "release", "recycle", "snapshot"})

VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (HELLO, STATUS, SNAPSHOT, SUBMIT, WAIT, CANCEL, PAUSE, RESUME, LEASE, RELEASE, RECYCLE, LIST, LOGS, SHOW)
}

# Refused on the read-only control socket and to tenants of the runtime.
CHANGING: frozenset[str] = frozenset(name for name, verb in VERBS.items() if verb.changes_state)
