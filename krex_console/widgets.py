"""Small widgets the app and its screens share."""

from __future__ import annotations

from textual.widgets import Input, Static


class StatusBar(Static):
    """Mode, connection (live / stale / disconnected) and node totals. The app
    writes it on every screen that has one."""

    DEFAULT_CSS = "StatusBar { height: 1; background: $panel; padding: 0 1; }"


class FilterInput(Input):
    DEFAULT_CSS = "FilterInput { display: none; height: 3; } FilterInput.shown { display: block; }"
