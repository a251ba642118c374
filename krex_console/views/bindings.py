"""Keys that several views share: the changing actions, hidden where the
console may not act, and the GPU and command actions of whatever view has a
GPU or a command selected.

A view asks the operator for an action by posting RequestAction; the app
confirms and sends it. Whether actions are offered at all (not in read-only
mode, not in replay) the view learns from the ActionGate it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from textual.binding import Binding
from textual.message import Message

from krex_console import actions
from krex_console.actions import PlannedAction
from krex_console.messages import RequestAction
from krex_runtime.wire.state.model import CommandInfo, GpuState

GPU_ACTION_BINDINGS = [
    Binding("l", "lease", "Lease"),
    Binding("u", "release", "Release"),
    Binding("c", "recycle", "Recycle"),
    Binding("p", "toggle_admission", "Admission"),  # pause or resume, whichever applies
]
KILL_BINDING = Binding("ctrl+k", "kill", "Kill")  # (k moves the cursor up, as in vi)


class ActionGate(Protocol):
    """Whether changing actions are offered now (the app answers: not in
    read-only mode, not in replay, not on a socket the runtime says is read-only),
    and whether the app can send this one for this target (a cluster console
    cannot kill a command whose cluster id it does not know)."""

    @property
    def actions_allowed(self) -> bool: ...

    def allows(self, action: str, target: object) -> bool: ...


class GatedActions:
    """check_action for widgets and screens that bind changing actions: they
    are hidden (not merely disabled) where the gate says actions are off,
    and where they do not apply to the selected target as it is now."""

    gate: ActionGate
    _offered: frozenset[str] | None = None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in actions.CHANGING_ACTIONS:
            return self.gate.actions_allowed and self.applies(action)
        return True

    def applies(self, action: str) -> bool:
        return True

    def offer_actions(self) -> None:
        """Show the keys of the actions that apply now (call when the selection
        or its state may have changed; the footer is redrawn only on a change)."""
        offered = frozenset(a for a in actions.CHANGING_ACTIONS if self.applies(a))
        if offered != self._offered:
            self._offered = offered
            self.refresh_bindings()

    if TYPE_CHECKING:  # the widget's or screen's own; a method here would hide it

        def refresh_bindings(self) -> None: ...

    if TYPE_CHECKING:  # the widget's or screen's own; a method here would hide it

        def post_message(self, message: Message) -> bool: ...

    def request(self, action: PlannedAction) -> None:
        self.post_message(RequestAction(action))


class GpuActions(GatedActions):
    """The GPU actions, for whatever view has a selected GPU."""

    def selected_gpu(self) -> GpuState | None:
        raise NotImplementedError

    def applies(self, action: str) -> bool:
        if action == "kill":
            return False
        gpu = self.selected_gpu()
        return gpu is not None and actions.gpu_offers(action, gpu)

    def _gpu_action(self, build: Callable[[GpuState], PlannedAction]) -> None:
        gpu = self.selected_gpu()
        if gpu is not None and actions.gpu_offers(build.__name__, gpu):
            self.request(build(gpu))

    def action_lease(self) -> None:
        self._gpu_action(actions.lease)

    def action_release(self) -> None:
        self._gpu_action(actions.release)

    def action_recycle(self) -> None:
        self._gpu_action(actions.recycle)

    def action_toggle_admission(self) -> None:
        self._gpu_action(actions.toggle_admission)


class CommandActions(GatedActions):
    """Kill, for whatever view has a selected command."""

    def selected_command(self) -> CommandInfo | None:
        raise NotImplementedError

    def applies(self, action: str) -> bool:
        if action != "kill":
            return False
        cmd = self.selected_command()
        return cmd is not None and actions.command_offers(action, cmd) and self.gate.allows(action, cmd)

    def action_kill(self) -> None:
        cmd = self.selected_command()
        if cmd is not None and self.applies("kill"):
            self.request(actions.kill(cmd))
