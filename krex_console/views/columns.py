"""Columns that fit the terminal: which ones a table shows, how wide, and in
what order its rows are sorted.

Each table declares its columns with a priority. The widest a column needs
is measured from its cells (never narrower than its label, never wider than
its cap); columns are taken in priority order while they fit, shown in
their declared order, and the one elastic column (a command line, an
event's fields) gets the room left. So an 80-column terminal shows the
figures that matter most, uncut, and a wider one shows more.

Sorting is k9s's: shift and a column's key letter (or a click on its
header) sorts by that column, the same again reverses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.text import Text

PADDING = 2  # a DataTable cell's padding, one space each side


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    priority: int  # lower is shown first when room is short; 0 is always shown
    cap: int = 0  # the widest it gets (longer cells end in "…"); 0: as wide as its cells
    flex: bool = False  # the elastic column: takes the room left, at least `least`
    hotkey: str = ""  # shift+this letter sorts by it
    least: int = 0  # at least this wide (the elastic column: when it is shown at all)


@dataclass(frozen=True)
class Row:
    key: str  # the row's stable identity: GPU UUID, command id, event seq
    cells: dict[str, Any]  # column key -> what it shows (str or rich Text)
    order: dict[str, Any]  # column key -> what it sorts by, where the text would mislead


def width_of(cell: Any) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(str(cell))


def crop(cell: Any, width: int) -> Any:
    """`cell` cut to `width` cells, ending in "…" when it was longer."""
    if width_of(cell) <= width:
        return cell
    text = cell.copy() if isinstance(cell, Text) else Text(str(cell))
    text.truncate(width, overflow="ellipsis")
    return text if isinstance(cell, Text) else text.plain


def needed(columns: Sequence[Column], rows: Iterable[Row]) -> dict[str, int]:
    widths = {c.key: max(cell_len(c.label), 0 if c.flex else c.least) for c in columns}
    for row in rows:
        for key, cell in row.cells.items():
            w = width_of(cell)
            if w > widths.get(key, 0):
                widths[key] = w
    return {c.key: min(widths[c.key], max(c.cap, cell_len(c.label))) if c.cap else widths[c.key] for c in columns}


def fit(columns: Sequence[Column], widths: dict[str, int], room: int) -> list[tuple[Column, int]]:
    """The columns shown in `room` cells, in declared order, with their widths."""
    chosen: set[str] = set()
    used = 0
    for c in sorted(columns, key=lambda c: c.priority):
        w = _least(c, widths) if c.flex else widths[c.key]
        if c.priority == 0 or used + w + PADDING <= room:
            chosen.add(c.key)
            used += w + PADDING
    layout = []
    for c in columns:
        if c.key not in chosen:
            continue
        w = widths[c.key]
        if c.flex:
            least = _least(c, widths)
            w = max(least, min(w, room - used + least))
        layout.append((c, w))
    return layout


def _least(column: Column, widths: dict[str, int]) -> int:
    return min(widths[column.key], max(cell_len(column.label), column.least)) if widths[column.key] else cell_len(column.label)


def sort_value(value: Any) -> tuple[int, Any]:
    """Orders numbers before text and missing values last, whatever their mix."""
    if isinstance(value, Text):
        value = value.plain
    if value is None or value == "" or value == "-" or value == "n/a":
        return (2, 0)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    if isinstance(value, tuple):
        return (0, tuple(sort_value(v) for v in value))
    return (1, str(value).lower())


def sorted_rows(rows: list[Row], column: str | None, reverse: bool) -> list[Row]:
    if column is None:
        return rows
    missing = [r for r in rows if sort_value(r.order.get(column, r.cells.get(column)))[0] == 2]
    present = [r for r in rows if sort_value(r.order.get(column, r.cells.get(column)))[0] != 2]
    present.sort(key=lambda r: sort_value(r.order.get(column, r.cells.get(column))), reverse=reverse)
    return present + missing  # missing values stay last either way
