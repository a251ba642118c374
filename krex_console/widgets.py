"""Small widgets the app and its screens share."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import Footer, Input, Static

# Between the header's fields: where it may go on to a second line.
FIELD = "\x1f"


def fit_fields(text: str, width: int) -> str:
    """The header's fields (markup, FIELD between them) laid into lines of
    `width` cells, two spaces apart: a field is never cut or broken, a
    narrow terminal gets a second line instead."""
    lines: list[list[str]] = [[]]
    used = 0
    for field in (f for f in text.split(FIELD) if f):
        w = Text.from_markup(field).cell_len
        if lines[-1] and used + 2 + w > width:
            lines.append([])
            used = 0
        used += w + (2 if lines[-1] else 0)
        lines[-1].append(field)
    return "\n".join("  ".join(line) for line in lines)


class StatusBar(Static):
    """Mode, connection (live / stale / disconnected) and node totals. The app
    writes it on every screen that has one; its fields fit the width (fit_fields)."""

    DEFAULT_CSS = "StatusBar { height: auto; background: $panel; padding: 0 1; }"

    def __init__(self, content: str = "", **kwargs: Any) -> None:
        self._fields = content
        super().__init__(content.replace(FIELD, "  "), **kwargs)

    def update(self, content: Any = "", *, layout: bool = True) -> None:
        self._fields = content if isinstance(content, str) else str(content)
        super().update(self._fitted(), layout=True)

    def on_resize(self) -> None:
        super().update(self._fitted(), layout=True)

    def _fitted(self) -> str:
        width = self.content_size.width or max(20, self.app.size.width - 2)
        return fit_fields(self._fields, width)


class FilterInput(Input):
    DEFAULT_CSS = "FilterInput { display: none; height: 3; } FilterInput.shown { display: block; }"


class KeysFooter(Footer):
    """The keys of the view. Below WIDE columns it is compact and leaves out
    the command palette's hint (ctrl+p still opens it; `?` lists every key),
    so that an 80-column terminal shows every key whole."""

    WIDE = 120

    def on_resize(self, event: events.Resize) -> None:
        narrow = event.size.width < self.WIDE
        self.compact = narrow
        self.show_command_palette = not narrow
