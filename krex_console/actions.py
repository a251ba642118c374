"""Operator actions: what each one asks the runtime, and who it names.

An action is built from the target the operator selected (a GPU by UUID, a
command by id), shown in a confirm dialog that names that target, and only
then sent. What it sends, what the dialog explains of it and how long the
console waits for the reply come from the runtime's verb table
(krex_runtime.wire.protocol.verbs); so does whether it changes state, which is what
hides its key in read-only mode and in replay. The runtime checks again: a
read-only client is refused there whatever the console shows
(docs/protocol.md, `refused`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.api import AsyncClient, RequestFailed, RuntimeUnavailable
from krex_runtime.wire.protocol import verbs
from krex_runtime.wire.protocol.verbs import Verb
from krex_runtime.wire.state.model import CommandInfo, GpuState

# The verbs each key action (as bound to keys: action_lease, ...) may send.
ACTION_VERBS: dict[str, tuple[Verb, ...]] = {
    "lease": (verbs.LEASE,),
    "release": (verbs.RELEASE,),
    "recycle": (verbs.RECYCLE,),
    "toggle_admission": (verbs.PAUSE, verbs.RESUME),
    "kill": (verbs.CANCEL,),
}

# Key actions that send a changing verb: check_action hides these in read-only and replay.
CHANGING_ACTIONS = frozenset(
    action for action, sent in ACTION_VERBS.items() if any(verb.changes_state for verb in sent)
)


@dataclass(frozen=True)
class PlannedAction:
    """One request to the runtime, with the words the confirm dialog shows."""

    title: str  # "Lease", "Pause admission on", ...: the question starts with it
    target: str  # "GPU 1 (GPU-SIM-demo-1)", "command 3f2a-17 (cand-0-3)"
    request: str  # the verb's name on the wire
    body: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    wait_s: float = 10.0

    @property
    def question(self) -> str:
        return f"{self.title} {self.target}?"


def plan(verb: Verb, title: str, target: str, body: dict[str, Any], note: str = "") -> PlannedAction:
    """The action that sends `verb` with `body`; its dialog explains what the
    verb table says of it, then `note` (what the console adds of the target)."""
    verb.body(**body)  # a body the verb does not take fails here, not at the runtime
    detail = f"{verb.confirm} {note}" if note else verb.confirm
    return PlannedAction(title, target, verb.name, body, detail=detail, wait_s=verb.wait_s)


@dataclass(frozen=True)
class ActionOutcome:
    action: PlannedAction
    ok: bool
    reply: Any = None
    code: str = ""
    reason: str = ""

    @property
    def message(self) -> str:
        if self.ok:
            return f"{self.action.title} {self.action.target}: done"
        return f"{self.action.title} {self.action.target} failed: {self.code}: {self.reason}"


def gpu_target(gpu: GpuState) -> str:
    return f"GPU {gpu.index} ({gpu.uuid})"


def lease(gpu: GpuState) -> PlannedAction:
    return plan(verbs.LEASE, "Lease", gpu_target(gpu), {"gpu": gpu.index})


def release(gpu: GpuState) -> PlannedAction:
    return plan(verbs.RELEASE, "Release", gpu_target(gpu), {"gpu": gpu.index})


def recycle(gpu: GpuState) -> PlannedAction:
    return plan(verbs.RECYCLE, "Recycle contexts of", gpu_target(gpu), {"gpu": gpu.index, "now": True})


def toggle_admission(gpu: GpuState) -> PlannedAction:
    if gpu.paused:
        return plan(verbs.RESUME, "Resume admission on", gpu_target(gpu), {"gpu": gpu.index})
    return plan(verbs.PAUSE, "Pause admission on", gpu_target(gpu), {"gpu": gpu.index})


def kill(command: CommandInfo) -> PlannedAction:
    name = f" ({command.label})" if command.label else ""
    return plan(verbs.CANCEL, "Kill", f"command {command.id}{name}", {"id": command.id},
                note=f"State now: {command.state}.")


LIVE_STATES = frozenset({"queued", "running"})


def operator_lease(gpu: GpuState) -> str:
    """"held", "pending" (queued for the GPU's region) or "" for an operator's lease."""
    if gpu.region_kind == "lease" and gpu.region_holder == 0:
        return "held"
    if any(q.get("kind") == "lease" and q.get("tenant_id") == 0 for q in gpu.region_queue):
        return "pending"
    return ""


def gpu_offers(action: str, gpu: GpuState) -> bool:
    """Whether the GPU action applies to this GPU as it is now: no lease of a
    leased GPU, no release of one nobody leased, no recycle without a pool."""
    if action == "lease":
        return not operator_lease(gpu)
    if action == "release":
        return bool(operator_lease(gpu))
    if action == "recycle":
        return bool((gpu.pool or {}).get("size"))
    return action == "toggle_admission"


def why_not_gpu(action: str, gpu: GpuState) -> str:
    """Why the GPU action does nothing on this GPU now ("" where it applies)."""
    if gpu_offers(action, gpu):
        return ""
    if action == "lease":
        return f"GPU {gpu.index} is leased already (u releases it)"
    if action == "release":
        return f"GPU {gpu.index} has no operator lease to release (l leases it)"
    if action == "recycle":
        return f"GPU {gpu.index} has no context pool to recycle (the runtime's [pool] size_per_gpu is 0)"
    return f"{action} does not apply to a GPU"


def why_not_command(action: str, command: CommandInfo) -> str:
    """Why kill does nothing on this command now ("" where it applies)."""
    if command_offers(action, command):
        return ""
    return f"command {command.id} has ended ({command.state}): nothing to kill"


def command_offers(action: str, command: CommandInfo) -> bool:
    """Kill applies to a command that has not ended."""
    return action == "kill" and command.state in LIVE_STATES


GPU_BUILDERS = {"lease": lease, "release": release, "recycle": recycle, "toggle_admission": toggle_admission}


def gpu_actions(gpu: GpuState) -> list[PlannedAction]:
    """The GPU actions that apply now, in the palette's order."""
    return [build(gpu) for name, build in GPU_BUILDERS.items() if gpu_offers(name, gpu)]


# Operator verbs a cluster gateway sends on to one node: their body names it
# (`node`); the gateway refuses them without one (docs/protocol.md, the operator verbs).
NODE_VERBS = frozenset(v.name for v in (verbs.LEASE, verbs.RELEASE, verbs.PAUSE, verbs.RESUME, verbs.RECYCLE))


def on_node(action: PlannedAction, node: str) -> PlannedAction:
    """The same action, sent through a cluster gateway to `node`; its dialog
    names the node too. Other verbs (cancel: the gateway finds the command by
    its id) go as they are."""
    if action.request not in NODE_VERBS:
        return action
    body = {**action.body, "node": node}
    verbs.VERBS[action.request].body(**body)  # a verb table without `node` fails here, not at the gateway
    return dataclasses.replace(action, target=f"{action.target} on node {node}", body=body)


async def perform(endpoint: str, action: PlannedAction) -> ActionOutcome:
    """Send one action on a connection of its own: a lease may wait minutes,
    and must not hold up the feed's connection."""
    try:
        async with AsyncClient(endpoint, timeout=action.wait_s) as client:
            reply = await client.call(action.request, action.body, action.wait_s)
    except RequestFailed as exc:
        return ActionOutcome(action, False, code=exc.code, reason=exc.reason)
    except RuntimeUnavailable as exc:
        return ActionOutcome(action, False, code="unavailable", reason=str(exc))
    return ActionOutcome(action, True, reply=reply)
