"""The console of a KREX cluster: a Nodes view, and each node's own views.

    krex-console --cluster ENDPOINT   # a cluster gateway (docs/console.md, "Clusters")
    krex-console --replay DIR         # a cluster trace: one node trace per file

The Nodes view (tab 0) has a row per node (nodes_feed.py feeds it). Enter
on a node opens that node's overview, commands and events (tabs 1 2 3) and
GPU detail, the same views as on one node, fed by a LiveFeed with that node
through the gateway's relay (or, in replay, by that node's trace); Esc goes
back to the Nodes view and stops that node's feed. Actions are the node
console's, with the same dialogs and the same rules of where they apply;
the verbs that target a GPU name the node (`node`), which the gateway
needs and checks (operators only).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.widgets import Static, TabbedContent, TabPane

from krex_console import actions
from krex_console.app import KrexConsole
from krex_console.cluster.nodes import NodesTable, node_panel
from krex_console.cluster.nodes_feed import ClusterFeed, ClusterReplayFeed, NodesChanged
from krex_console.event_log import EventLog
from krex_console.feed import FeedStatus, LiveFeed
from krex_console.messages import NodeHighlighted, OpenCommand, OpenNode
from krex_console.views.command_list import CommandDetailScreen
from krex_console.widgets import FIELD, FilterInput
from krex_runtime.wire.state.model import CommandInfo, NodeState

NODE_TABS = ("overview", "commands", "events")


class ClusterConsole(KrexConsole):
    TITLE = "krex-console (cluster)"
    CSS = KrexConsole.CSS + "#nodes-summary { height: auto; max-height: 50%; border: round $accent; padding: 0 1; }"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("0", "show_tab('nodes')", "Nodes", show=False)]
    INITIAL_TAB = "nodes"
    TABLES: ClassVar[dict[str, Any]] = {"nodes": NodesTable, **KrexConsole.TABLES}

    def __init__(self, control: str | None = None, telemetry: str | None = None, read_only: bool = False,
                 replay: ClusterReplayFeed | None = None) -> None:
        super().__init__(control=control, telemetry=None, read_only=read_only, replay=replay)
        self.cluster: ClusterFeed | None = None
        self.cluster_replay = replay  # self.replay too, typed as what it is here (it also takes a focus)
        if replay is None:
            assert control is not None
            self.cluster = ClusterFeed(control, self.post_message, telemetry)
        self.cluster_status = FeedStatus.REPLAY if replay is not None else FeedStatus.CONNECTING
        self.cluster_detail = ""

    def compose_panes(self) -> ComposeResult:
        with TabPane("0 Nodes", id="nodes"), Vertical():
            yield NodesTable(self.model)
            yield Static(id="nodes-summary")

    def on_mount(self) -> None:  # (Textual runs KrexConsole.on_mount too, after this)
        if self.cluster is not None:
            self.run_worker(self.cluster.run(), name="cluster", group="cluster")
        self._show_node_tabs(False)

    def _show_node_tabs(self, shown: bool) -> None:
        tabs = self.query_one("#tabs", TabbedContent)
        for tab in NODE_TABS:
            (tabs.show_tab if shown else tabs.hide_tab)(tab)

    # --- the Nodes view -----------------------------------------------------------

    def on_nodes_changed(self, message: NodesChanged) -> None:
        self.model.nodes = message.nodes
        self.model.cluster_now = message.now if self.replay is not None else time.time()
        self.cluster_status, self.cluster_detail = message.status, message.detail
        if message.read_only and not self.read_only:
            self.read_only = True  # the gateway says this endpoint is read-only
            self.refresh_bindings()
        self._dirty = True

    def refresh_views(self) -> None:
        super().refresh_views()
        if self.screen is self.screen_stack[0] and self.model.node is None:
            try:
                self._show_node_panel(self.query_one(NodesTable).selected_node())
            except NoMatches:
                pass  # being mounted or taken down

    def _show_node_panel(self, node: Any) -> None:
        try:
            self.query_one("#nodes-summary", Static).update(node_panel(node))
        except NoMatches:
            pass

    def on_node_highlighted(self, message: NodeHighlighted) -> None:
        self._show_node_panel(next((n for n in self.model.nodes if n.name == message.name), None))

    def node_summary(self) -> Any:
        return next((n for n in self.model.nodes if n.name == self.model.node), None)

    def status_text(self) -> str:
        node = self.model.node
        if node is not None:
            summary = self.node_summary()
            # First, so that an 80-column header still says it.
            down = (f"[b red]NODE DOWN: {summary.reason or 'no reason given'}[/]{FIELD}"
                    if summary is not None and not summary.alive else "")
            return f"{down}{super().status_text()}{FIELD}[dim]esc: all nodes[/]"
        nodes = self.model.nodes
        figures = FIELD.join([
            "cluster", f"nodes {sum(1 for n in nodes if n.alive)}/{len(nodes)} alive", f"GPUs {sum(n.gpu_count for n in nodes)}",
            f"running {sum(n.running for n in nodes)}/{sum(n.slots for n in nodes)}", f"queued {sum(n.queued for n in nodes)}",
        ])
        if self.replay is not None:
            return f"[b reverse] REPLAY [/] {self.replay.describe()}{FIELD}{figures}"
        badge = {
            FeedStatus.LIVE: "[b green]● LIVE[/]",
            FeedStatus.CONNECTING: "[b yellow]◌ CONNECTING[/]",
            FeedStatus.DISCONNECTED: f"[b red]✖ DISCONNECTED[/] ({self.cluster_detail}; retrying)",
        }.get(self.cluster_status, self.cluster_status)
        return f"{badge}{FIELD + '[b magenta]READ-ONLY[/]' if self.read_only else ''}{FIELD}{figures}"

    # --- drilling in and out --------------------------------------------------------

    def on_open_node(self, message: OpenNode) -> None:
        name = message.name
        m = self.model
        m.node, m.state, m.log = name, NodeState(), EventLog()
        m.history.clear()
        if self.cluster_replay is not None:
            self.cluster_replay.set_focus(name)
        else:
            assert self.cluster is not None and self.control_endpoint is not None
            if not self.cluster.telemetry:
                self.notify("the gateway has not answered yet", severity="warning")
                m.node = None
                return
            self.live = LiveFeed(self.control_endpoint, self.cluster.telemetry, self.post_message, node=name)
            self.status = FeedStatus.CONNECTING
            self.run_worker(self.live.run(), name="feed", group="feed", exclusive=True)
        self._show_node_tabs(True)
        self.action_show_tab("overview")

    def leave_node(self) -> None:
        if self.cluster_replay is None:
            self.workers.cancel_group(self, "feed")  # the node's LiveFeed: its sockets close with it
        else:
            self.cluster_replay.set_focus(None)
        self.live = None
        self.model.node = None
        self.query_one("#tabs", TabbedContent).active = "nodes"
        self._show_node_tabs(False)
        self._focus_table("nodes")
        self._dirty = True

    def action_show_tab(self, tab: str) -> None:
        if tab in NODE_TABS and self.model.node is None:
            self.notify("open a node first (enter on its row)", timeout=2)
            return
        if tab == "nodes" and self.model.node is not None and self.screen is self.screen_stack[0]:
            self.leave_node()
            return
        super().action_show_tab(tab)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "filter" and self.model.node is None:
            return False  # the filters are the node's commands' and events'
        return super().check_action(action, parameters)

    def action_filter(self) -> None:
        if self.model.node is not None:
            super().action_filter()

    async def action_back(self) -> None:
        """Esc: close a dialog or a detail screen, clear a filter; else leave the node."""
        filtering = any(box.has_class("shown") for box in self.query(FilterInput))
        if self.screen is not self.screen_stack[0] or filtering or self.model.node is None:
            await super().action_back()
            return
        self.leave_node()

    # --- actions: the node's, through the gateway -------------------------------------

    def cluster_id(self, command_id: str) -> str | None:
        """The gateway's id of the open node's command `command_id` (the node's
        views show the node's own ids; the gateway's cancel and wait take its)."""
        if self.cluster is None or self.model.node is None:
            return None
        return self.cluster.cluster_id(self.model.node, command_id)

    def allows(self, action: str, target: object) -> bool:
        if action == "kill" and self.replay is None and isinstance(target, CommandInfo):
            return self.cluster_id(target.id) is not None
        return True

    def confirm_and_perform(self, plan: actions.PlannedAction) -> None:
        if self.model.node is not None and self.replay is None:
            plan = actions.on_node(plan, self.model.node)
            if plan.request == "cancel":
                cid = self.cluster_id(str(plan.body.get("id")))
                if cid is None:
                    self.notify(f"{plan.target}: the gateway has not said which of its commands it is", severity="error")
                    return
                plan = dataclasses.replace(plan, body={**plan.body, "id": cid},
                                           target=f"{plan.target} on node {self.model.node} (cluster id {cid})")
        super().confirm_and_perform(plan)

    def on_open_command(self, message: OpenCommand) -> None:
        message.prevent_default()  # (KrexConsole's opens one node's: the ids are the gateway's here)
        if self.replay is not None:
            self.push_screen(CommandDetailScreen(message.command_id, self.model, gate=self, endpoint=None,
                                                 status=self.status_text()))
            return
        cid = self.cluster_id(message.command_id)
        self.push_screen(CommandDetailScreen(
            message.command_id, self.model, gate=self, endpoint=self.control_endpoint if cid else None,
            status=self.status_text(), output_id=cid,
            no_output="(no output here: the gateway's status does not say which of its commands this is; "
                      "`krex --cluster ENDPOINT wait ID` streams it by its cluster id)"))
