"""Keep a DataTable equal to a list of keyed rows without rebuilding it.

Rows are keyed by a stable identity (GPU UUID, command id, event seq), never
by position: the cursor stays on the same GPU or command when rows are added,
removed or re-sorted, and unchanged cells are not touched, so a table that is
refreshed ten times a second does not flicker. A change of order is applied
by sorting the rows the table has (DataTable.sort), not by clearing it: a
clear puts the cursor and the scroll back at the top for a moment, and costs
every row again.

FittedTable adds the columns that fit (columns.py) and k9s-style sorting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, ColumnKey, RowDoesNotExist

from krex_console.views.columns import Column, Row, crop, fit, needed, sorted_rows

Cells = tuple[str, Sequence[Any]]
REBUILD_FROM = 64  # more rows gone than this: one rebuild is cheaper than removing each


def selected_key(table: DataTable[Any]) -> str | None:
    if table.row_count == 0:
        return None
    try:
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    except CellDoesNotExist:
        return None
    return key.value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Text) and isinstance(b, Text):
        return a.plain == b.plain and a.spans == b.spans and a.style == b.style
    return type(a) is type(b) and a == b


class DuplicateRowKey(ValueError):
    """Two rows a view made share a key: the view's rows lost their identity."""


def _check_unique(table: DataTable[Any], keys: list[str]) -> None:
    """Before the table is touched, so it stays as it was; Textual's own
    DuplicateKey, raised halfway through, names no key."""
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise DuplicateRowKey(f"{type(table).__name__}: two rows have the key {key!r}")
        seen.add(key)


def sync_rows(table: DataTable[Any], rows: Sequence[Cells]) -> None:
    column_keys = list(table.columns.keys())
    wanted = [key for key, _ in rows]
    _check_unique(table, wanted)
    keep = selected_key(table)
    # Rows added above the cursor push its row down: if the operator could see
    # it, the view follows it; if they had scrolled away from it (the mouse
    # wheel moves the view, not the cursor), the rows they look at stay where
    # they are instead of the view jumping back to the cursor at every update.
    follow = keep is not None and row_visible(table, table.cursor_row)
    top_at = min(int(table.scroll_y), table.row_count - 1)
    top = None if follow or top_at < 0 else table.ordered_rows[top_at].key.value
    present = {k.value for k in table.rows if k.value is not None}
    gone = present.difference(wanted)
    if len(gone) > REBUILD_FROM:
        table.clear()
        present = set()
    else:
        for key in gone:
            table.remove_row(key)
    for key, cells in rows:
        if key in present:
            for column, new, was in zip(column_keys, cells, table.get_row(key), strict=True):
                if not _same(new, was):
                    table.update_cell(key, column, new)
        else:
            table.add_row(*cells, key=key)
    if [row.key.value for row in table.ordered_rows] != wanted:
        _order_by_keys(table, rows)
    if keep is not None:
        select_key(table, keep)  # Textual's cursor watcher brings a moved cursor into view
    if top is not None:
        _keep_at_top(table, top, top_at)


def row_visible(table: DataTable[Any], row: int) -> bool:
    """Whether row `row` (rows are one line high here) is inside the viewport."""
    top = int(table.scroll_y)
    return top <= row < top + max(1, table.scrollable_content_region.height - table.header_height)


def _keep_at_top(table: DataTable[Any], key: str, was_at: int) -> None:
    """If rows came or went above `key`'s row, the first shown, scroll so that
    it is first again, after the refresh: the cursor's watcher scrolls to the
    cursor then too, and this comes after it. A row that did not move leaves
    the scroll alone (a view still on its way to the cursor gets there)."""
    try:
        index = table.get_row_index(key)
    except RowDoesNotExist:
        return
    if index != was_at:
        table.call_after_refresh(table.scroll_to, y=index, animate=False)


def _order_by_keys(table: DataTable[Any], rows: Sequence[Cells]) -> None:
    """Put the table's rows in the order of `rows`, as DataTable.sort does
    (new row locations, a new update count), but by row key: sort() only
    sees cell values."""
    position = {key: i for i, (key, _) in enumerate(rows)}
    try:
        from textual._two_way_dict import TwoWayDict

        ordered = sorted(table.rows, key=lambda k: position[k.value or ""])
        table._row_locations = TwoWayDict({key: i for i, key in enumerate(ordered)})
        table._update_count += 1
        table.refresh()
    except (ImportError, AttributeError):  # another Textual's insides: rebuild instead
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)


def select_key(table: DataTable[Any], key: str) -> bool:
    try:
        index = table.get_row_index(key)
    except RowDoesNotExist:
        return False
    if index != table.cursor_row:
        table.move_cursor(row=index, animate=False, scroll=False)
    return True


class FittedTable(DataTable[Any]):
    """A DataTable of declared COLUMNS that shows those that fit, sorted by the
    operator's choice; `show(rows)` is its one update."""

    COLUMNS: ClassVar[list[Column]] = []
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.fitted: list[tuple[Column, int]] = []
        self._widths: dict[str, int] = {}
        self._rows: list[Row] | None = None
        self.sort_column: str | None = None
        self.sort_reverse = False

    def room(self) -> int:
        width = self.size.width or (self.app.size.width if self.is_attached else 0)
        return max(20, width - 2)  # a vertical scrollbar's room kept, so rows never shift under it

    def show(self, rows: list[Row]) -> None:
        self._rows = rows
        widths = needed(self.COLUMNS, rows)
        # Widths only grow (until the table is reset): columns do not jitter as values come and go.
        self._widths = {k: max(w, self._widths.get(k, 0)) for k, w in widths.items()}
        if self.sort_column in self._widths:  # room for the sort mark
            label = next(c.label for c in self.COLUMNS if c.key == self.sort_column)
            self._widths[self.sort_column] = max(self._widths[self.sort_column], len(label) + 1)
        layout = fit(self.COLUMNS, self._widths, self.room())
        keep = None
        if [c for c, _ in layout] == [c for c, _ in self.fitted] and layout != self.fitted:
            self._widen(layout)  # the same columns, some wider: no need to start afresh
        if layout != self.fitted:
            keep = selected_key(self)  # a new set of columns starts the table afresh: the cursor stays put
            self.clear(columns=True)
            for column, width in layout:
                self.add_column(self._label(column), key=column.key, width=width)
            self.fitted = layout
        ordered = sorted_rows(rows, self.sort_column, self.sort_reverse)
        sync_rows(self, [(r.key, [crop(r.cells.get(c.key, ""), w) for c, w in layout]) for r in ordered])
        if keep is not None and select_key(self, keep):
            self.move_cursor(row=self.cursor_row, animate=False, scroll=True)

    def _widen(self, layout: list[tuple[Column, int]]) -> None:
        """New widths for the columns shown, in place (DataTable has no public
        way; without its insides, start the table afresh instead)."""
        try:
            for column, width in layout:
                self.columns[ColumnKey(column.key)].width = width
            self._clear_caches()
        except (AttributeError, KeyError):
            return
        self.fitted = layout
        self.refresh()

    def _label(self, column: Column) -> Text:
        """The header: the sort hotkey's letter underlined, ▲/▼ on the sort column."""
        label = Text(column.label)
        at = column.label.lower().find(column.hotkey.lower()) if column.hotkey else -1
        if at >= 0:
            label.stylize("underline", at, at + 1)
        if column.key == self.sort_column:
            label.append("▼" if self.sort_reverse else "▲")
        return label

    def reset_widths(self) -> None:
        self._widths = {}

    def on_resize(self, event: events.Resize) -> None:
        if self._rows is not None:
            self.show(self._rows)

    # --- sorting ------------------------------------------------------------------

    def sort_by(self, key: str | None) -> None:
        """Sort by `key` (None: the view's own order); the same key again reverses."""
        if key is not None and key == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = key, False
        self.fitted = []  # the header marks the sort column
        if self._rows is not None:
            self.show(self._rows)

    def on_key(self, event: events.Key) -> None:
        char = event.character or ""
        if len(char) == 1 and char.isupper():
            column = next((c for c in self.COLUMNS if c.hotkey.upper() == char), None)
            if column is not None:
                event.stop()
                event.prevent_default()
                self.sort_by(column.key)
                self.notify(f"sorted by {column.label}{' (reversed)' if self.sort_reverse else ''}", timeout=2)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(event.column_key.value)
