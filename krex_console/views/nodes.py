"""The cluster's Nodes view: one row per node, keyed by its name; Enter opens
that node's own views (overview, GPU detail, commands, events)."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from krex_console import cluster_model as cm
from krex_console import format as fmt
from krex_console.cluster_model import NodeSummary
from krex_console.messages import NodeHighlighted, OpenNode
from krex_console.model import ConsoleModel
from krex_console.views.columns import Column, Row
from krex_console.views.table_sync import FittedTable, selected_key

# Priorities: at 80 columns which node, whether it is up (and why not), who
# holds its GPUs' regions, how loaded and how trustworthy its timings are;
# a wider terminal adds admission, policy, how long it has been up or down.
COLUMNS = [
    Column("node", "Node", 0, cap=24, hotkey="N", least=8),
    Column("state", "State", 0, cap=22, hotkey="S", least=5),
    Column("since", "Since", 6, hotkey="I"),
    Column("gpus", "GPUs", 1, hotkey="G"),
    Column("holders", "Regions", 1, cap=18, hotkey="R", least=7),
    Column("region_queue", "RQ", 2, hotkey="Q"),
    Column("queued", "AQ", 2, hotkey="A"),
    Column("running", "Run", 1, hotkey="U", least=5),
    Column("inflation", "Infl p95", 3, hotkey="F"),
    Column("admission", "Admit", 5, hotkey="D", least=6),
    Column("policy", "Policy", 7, hotkey="P"),
    Column("labels", "Labels", 4, flex=True, hotkey="L", least=12),
]


def node_row(node: NodeSummary, now: float) -> Row:
    known = node.gpus is not None
    worst = cm.worst_inflation(node)
    state = cm.state_text(node)
    since = now - node.since if node.since is not None else None
    cells = {
        "node": Text(node.name, style="bold" if node.alive else "dim"),
        "state": Text(state, style="green" if state == "alive" else "bold red"),
        "since": fmt.duration(since) if since is not None else "-",
        "gpus": str(node.gpu_count),
        "holders": Text(cm.holders_text(node), style="bold yellow" if cm.holders_text(node) not in ("-", fmt.NA) else "dim"),
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
    head = f"[b]{node.name}[/b]  {cm.state_text(node)}  labels {cm.labels_text(node)}"
    if node.gpus is None:
        return f"{head}\nno status from this node" + (f" ({node.reason})" if node.reason else "")
    return "\n".join([f"{head}  policy {node.policy or fmt.NA}", *(cm.gpu_line_text(g) for g in node.gpus),
                      "enter: this node's overview, GPUs, commands and events"])


class NodesTable(FittedTable):
    COLUMNS = COLUMNS
    BINDINGS = [Binding("enter", "select_cursor", "Open")]

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
