"""The cluster's Nodes view: one row per node, keyed by its name; Enter opens
that node's own views (overview, GPU detail, commands, events)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from krex_console import cluster_model as cm
from krex_console import format as fmt
from krex_console.cluster_model import NodeSummary
from krex_console.messages import NodeHighlighted, OpenNode
from krex_console.model import ConsoleModel
from krex_console.views.columns import Column, Row
from krex_console.views.table_sync import FittedTable, selected_key

# Priorities: at 80 columns which node, whether it is up and why not, who
# holds its GPUs' regions, how loaded and how trustworthy its timings are;
# a wider terminal adds its GPU count, labels, admission, how long it has
# been up or down, its policy. The reason a node is down is the elastic column: it takes
# the room left, and the panel under the table has it whole.
NAME_CELLS = 18  # a longer name keeps its start and its end: nodes often differ only in a suffix
COLUMNS = [
    Column("node", "Node", 0, cap=NAME_CELLS, hotkey="N", least=6),
    Column("state", "State", 0, hotkey="S"),
    Column("gpus", "GPUs", 3, hotkey="G"),
    Column("holders", "Regions", 1, cap=10, hotkey="R", least=7),
    Column("region_queue", "RQ", 2, hotkey="Q"),
    Column("queued", "AQ", 2, hotkey="A"),
    Column("running", "Run", 1, hotkey="U"),
    Column("inflation", "Infl", 2, hotkey="F"),
    Column("labels", "Labels", 4, cap=28, hotkey="L", least=8),
    Column("admission", "Admit", 5, hotkey="D", least=6),
    Column("since", "Since", 6, hotkey="I"),
    Column("policy", "Policy", 7, hotkey="P"),
    Column("reason", "Why", 3, flex=True, hotkey="W", least=12),
]


def short_name(name: str, cells: int = NAME_CELLS) -> str:
    """`name` in `cells` cells: its start, "…", its end."""
    if len(name) <= cells:
        return name
    tail = (cells - 1) // 2
    return f"{name[: cells - 1 - tail]}…{name[-tail:]}"


def node_row(node: NodeSummary, now: float) -> Row:
    known = node.gpus is not None
    worst = cm.worst_inflation(node)
    state = cm.state_text(node)
    since = now - node.since if node.since is not None else None
    holders = cm.holders_text(node)
    cells = {
        "node": Text(short_name(node.name), style="bold" if node.alive else "dim"),
        "state": Text(state, style="green" if state == "up" else "bold red"),
        "reason": Text(node.reason or "", style="red"),
        "since": fmt.duration(since) if since is not None else "-",
        "gpus": str(node.gpu_count),
        "holders": Text(holders, style="bold yellow" if holders not in ("-", fmt.NA) else "dim"),
        "region_queue": str(sum(g.region_queue for g in node.gpus or ())) if known else fmt.NA,
        "queued": str(node.queued) if known else fmt.NA,
        "running": f"{node.running}/{node.slots}" if known else fmt.NA,
        "inflation": fmt.inflation_short(worst) if worst is not None else Text(fmt.NA, style="dim"),
        "admission": cm.admission_text(node),
        "policy": node.policy or fmt.NA,
        "labels": cm.labels_text(node),
    }
    order = {
        "state": (0 if node.alive else 1, state), "since": since, "gpus": node.gpu_count,
        "region_queue": sum(g.region_queue for g in node.gpus or ()) if known else None,
        "queued": node.queued if known else None, "running": node.running if known else None, "inflation": worst,
        "node": node.name,
    }
    return Row(node.name, cells, order)


def node_panel(node: NodeSummary | None) -> str:
    """The highlighted node: its state, labels, and a line per GPU."""
    if node is None:
        return "no node yet"
    why = f": {node.reason}" if node.reason else ""
    head = f"[b]{node.name}[/b]  {cm.state_text(node)}{why}  labels {cm.labels_text(node)}"
    if node.gpus is None:
        return f"{head}\nno status from this node"
    return "\n".join([f"{head}  policy {node.policy or fmt.NA}", *(cm.gpu_line_text(g) for g in node.gpus),
                      "enter: this node's overview, GPUs, commands and events"])


class NodesTable(FittedTable):
    COLUMNS = COLUMNS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Open")]

    def __init__(self, model: ConsoleModel) -> None:
        super().__init__(id="nodes-table")
        self.model = model

    def refresh_from(self, model: ConsoleModel) -> None:
        self.show([node_row(node, model.cluster_now) for node in model.nodes])

    def selected_node(self) -> NodeSummary | None:
        name = selected_key(self)
        return next((n for n in self.model.nodes if n.name == name), None) if name else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        node = self.selected_node()
        if node is not None:
            self.post_message(OpenNode(node.name))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        node = self.selected_node()
        self.post_message(NodeHighlighted(node.name if node is not None else None))
