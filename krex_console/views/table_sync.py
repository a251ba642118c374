"""Keep a DataTable equal to a list of keyed rows without rebuilding it.

Rows are keyed by a stable identity (GPU UUID, command id, event seq), never
by position: the cursor stays on the same GPU or command when rows are added,
removed or re-sorted, and unchanged cells are not touched, so a table that is
refreshed ten times a second does not flicker.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

Row = tuple[str, Sequence[Any]]


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


def sync_rows(table: DataTable[Any], rows: Sequence[Row]) -> None:
    column_keys = list(table.columns.keys())
    current = [k.value for k in table.rows.keys()]
    wanted = [key for key, _ in rows]
    keep = selected_key(table)
    if current == wanted[: len(current)]:
        # Same rows in the same order, maybe some appended: touch only what changed.
        for key, cells in rows[: len(current)]:
            old = table.get_row(key)
            for column, new, was in zip(column_keys, cells, old):
                if not _same(new, was):
                    table.update_cell(key, column, new, update_width=True)
        for key, cells in rows[len(current) :]:
            table.add_row(*cells, key=key)
        return
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if keep is not None:
        select_key(table, keep)


def select_key(table: DataTable[Any], key: str) -> bool:
    try:
        index = table.get_row_index(key)
    except RowDoesNotExist:
        return False
    table.move_cursor(row=index, animate=False, scroll=False)
    return True
