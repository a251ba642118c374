"""Operator actions: what each one asks the runtime, and who it names.

An action is built from the target the operator selected (a GPU by UUID, a
command by id), shown in a confirm dialog that names that target, and only
then sent. The runtime checks again: a read-only client is refused there
whatever the console shows (docs/protocol.md, `refused`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from krex_runtime.wire.control_client import ControlClient, RequestFailed, RuntimeUnavailable
from krex_runtime.wire.state import CommandInfo, GpuState

# A lease waits for the GPU's region queue; give it time before calling it lost.
LEASE_WAIT_S = 600.0

# Action names as bound to keys; check_action hides these in read-only and replay.
CHANGING_ACTIONS = frozenset({"lease", "release", "recycle", "toggle_admission", "kill"})


@dataclass(frozen=True)
class PlannedAction:
    """One request to the runtime, with the words the confirm dialog shows."""

    verb: str  # "Lease", "Release", ...
    target: str  # "GPU 1 (GPU-SIM-demo-1)", "command 3f2a-17 (cand-0-3)"
    request: str
    body: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    wait_s: float = 10.0

    @property
    def question(self) -> str:
        return f"{self.verb} {self.target}?"


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
            return f"{self.action.verb} {self.action.target}: done"
        return f"{self.action.verb} {self.action.target} failed: {self.code}: {self.reason}"


def gpu_target(gpu: GpuState) -> str:
    return f"GPU {gpu.index} ({gpu.uuid})"


def lease(gpu: GpuState) -> PlannedAction:
    return PlannedAction(
        "Lease", gpu_target(gpu), "lease", {"gpu": gpu.index},
        detail="Waits for the GPU's region, then gates, drains and freezes its tenants until released "
        "or the lease expires (regions.lease_ttl_s).",
        wait_s=LEASE_WAIT_S,
    )


def release(gpu: GpuState) -> PlannedAction:
    return PlannedAction(
        "Release", gpu_target(gpu), "release", {"gpu": gpu.index},
        detail="Ends the operator's lease: thaw, reopen the gate, admit again.",
    )


def recycle(gpu: GpuState) -> PlannedAction:
    return PlannedAction(
        "Recycle contexts of", gpu_target(gpu), "recycle", {"gpu": gpu.index, "now": True},
        detail="Replaces the pooled context processes of this GPU now.",
    )


def toggle_admission(gpu: GpuState) -> PlannedAction:
    if gpu.paused:
        return PlannedAction("Resume admission on", gpu_target(gpu), "resume", {"gpu": gpu.index},
                             detail="Queued commands may start on this GPU again.")
    return PlannedAction("Pause admission on", gpu_target(gpu), "pause", {"gpu": gpu.index},
                         detail="No new command starts on this GPU; running ones continue.")


def kill(command: CommandInfo) -> PlannedAction:
    name = f" ({command.label})" if command.label else ""
    return PlannedAction(
        "Kill", f"command {command.id}{name}", "cancel", {"id": command.id},
        detail=f"Ends its whole process tree (state now: {command.state}).",
    )


def perform(endpoint: str, action: PlannedAction) -> ActionOutcome:
    """Send one action on a connection of its own (blocking: run it in a thread;
    a lease may wait minutes and must not hold up the feed's socket)."""
    try:
        with ControlClient(endpoint, timeout_s=action.wait_s) as client:
            reply = client.call(action.request, action.body)
    except RequestFailed as exc:
        return ActionOutcome(action, False, code=exc.code, reason=exc.reason)
    except RuntimeUnavailable as exc:
        return ActionOutcome(action, False, code="unavailable", reason=str(exc))
    return ActionOutcome(action, True, reply=reply)
