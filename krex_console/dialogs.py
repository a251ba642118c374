"""Modal dialogs: confirm (names its target, Cancel is the default), seek, help."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from krex_console.actions import PlannedAction

T = TypeVar("T")


class EscCancels(ModalScreen[T]):
    """A dialog that Esc closes with its `cancelled` answer."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, cancelled: T) -> None:
        super().__init__()
        self.cancelled = cancelled

    def action_cancel(self) -> None:
        self.dismiss(self.cancelled)


class ConfirmDialog(EscCancels[bool]):
    """Asks before a changing action. Cancel has the focus, so Enter (and Esc)
    leave the node as it is; confirming takes a deliberate Tab or click."""

    DEFAULT_CSS = """
    ConfirmDialog { align: center middle; }
    ConfirmDialog > Vertical {
        width: 70; max-width: 95%; height: auto; border: thick $error; background: $surface; padding: 1 2;
    }
    ConfirmDialog #question { text-style: bold; }
    ConfirmDialog #detail { color: $text-muted; margin: 1 0; }
    ConfirmDialog Horizontal { height: auto; align-horizontal: right; }
    ConfirmDialog Button { margin-left: 2; }
    """

    def __init__(self, action: PlannedAction) -> None:
        super().__init__(cancelled=False)
        self.action_plan = action

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.action_plan.question, id="question")
            yield Static(self.action_plan.detail, id="detail")
            with Horizontal():
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(self.action_plan.title.split()[0], id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")


class SeekDialog(EscCancels["float | None"]):
    """Asks for a replay position in seconds from the start of the trace."""

    DEFAULT_CSS = """
    SeekDialog { align: center middle; }
    SeekDialog > Vertical { width: 60; height: auto; border: thick $accent; background: $surface; padding: 1 2; }
    """

    def __init__(self, span_s: float) -> None:
        super().__init__(cancelled=None)
        self.span_s = span_s

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Seek to (seconds from the trace start, 0 to {self.span_s:.1f}):")
            yield Input(placeholder="e.g. 12.5", id="seek-to")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(float(event.value))
        except ValueError:
            self.notify(f"not a number of seconds: {event.value!r}", severity="error")


# Every line fits an 80x24 terminal whole (72 cells inside the dialog's
# border and padding), so no phrase wraps and nothing is cut.
HELP_TEXT = """\
[b]Views[/b]  1 node overview   2 commands   3 events (audit log)
  e  evaluations: batches, their pairs (tab), a pair's detail
  0  a cluster's nodes (enter: that node's views; esc: all nodes)
  enter  open the selected GPU / command       esc  back
  j / k  down / up     /  filter (commands, events)     ctrl+p  palette
  shift+letter (the underlined one) or a click on a header: sort by
  that column, again to reverse;  s  step the commands' sort

[b]Actions[/b]  live, not read-only; each asks first (Cancel is the default);
  offered only where they apply to the selected GPU or command
  l  lease the GPU     u  release its lease     c  recycle its contexts
  p  pause / resume admission on the GPU        ctrl+k  kill the command

[b]Replay[/b]
  space  play / pause    n  step one event      + / -  speed
  g  seek to a time      [ / ]  back / forward 10 s

  q or ctrl+c  quit      ?  this help           esc  close it"""
HELP_WIDTH = 72  # the widest line above


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 78; max-width: 100%; height: auto; border: thick $accent; background: $surface; padding: 0 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(HELP_TEXT, id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
