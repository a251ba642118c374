"""What the views ask of the app. A view never calls into the app: it posts
one of these, it bubbles up to the app, and the app decides what happens
(open a screen, ask the operator to confirm, refuse in read-only mode).

The feed's messages (StateChanged, FeedStatusChanged) are in feed.py, beside
the workers that post them.
"""

from __future__ import annotations

from textual.message import Message

from krex_console.actions import PlannedAction


class OpenGpu(Message):
    """Show this GPU's detail (Enter on a GPU)."""

    def __init__(self, uuid: str) -> None:
        super().__init__()
        self.uuid = uuid


class OpenCommand(Message):
    """Show this command's detail (Enter on a command)."""

    def __init__(self, command_id: str) -> None:
        super().__init__()
        self.command_id = command_id


class GpuHighlighted(Message):
    """The overview's cursor is on this GPU now: the panel under it follows."""

    def __init__(self, uuid: str | None) -> None:
        super().__init__()
        self.uuid = uuid


class RequestAction(Message):
    """The operator asked for a changing action on a target they selected; the
    app confirms it with them, then sends it (or refuses, when actions are off)."""

    def __init__(self, action: PlannedAction) -> None:
        super().__init__()
        self.action = action


class OpenNode(Message):
    """Show this cluster node's own views (Enter on a node)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class NodeHighlighted(Message):
    """The Nodes view's cursor is on this node now: the panel under it follows."""

    def __init__(self, name: str | None) -> None:
        super().__init__()
        self.name = name
