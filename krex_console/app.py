"""The operator console's Textual app for one node's KREX runtime (its command
line is krex_console/main.py).

    krex-console                      # this node's runtime (KREX_ENDPOINT / KREX_RUN_DIR / default)
    krex-console --connect ENDPOINT   # another runtime
    krex-console --read-only          # the read-only control socket; no actions
    krex-console --replay TRACE       # play a recorded trace through the same views

The console is a thin client: it speaks the runtime's protocol
(krex_runtime.wire.protocol.envelope, through krex_runtime.api's AsyncClient) and folds events with the runtime's
own reducer (krex_runtime.wire.state.apply.apply); it never imports runtime internals.

The app decides; the views ask. A view posts a message (messages.py: open a
GPU or a command, request an action) that bubbles up to the handlers here,
and never imports this module.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, ClassVar

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input, Static, TabbedContent, TabPane

from krex_console import actions
from krex_console import format as fmt
from krex_console.dialogs import ConfirmDialog, HelpScreen, SeekDialog
from krex_console.feed import FeedStatus, FeedStatusChanged, LiveFeed, ReplayFeed, StateChanged
from krex_console.messages import GpuHighlighted, OpenCommand, OpenGpu, RequestAction
from krex_console.model import ConsoleModel, gpu_by_uuid, tenants_of
from krex_console.views.command_list import CommandDetailScreen, CommandsTable
from krex_console.views.evaluations import EvaluationsScreen
from krex_console.views.events import EventsTable
from krex_console.views.gpu_detail import GpuDetailScreen, summarize_gpu
from krex_console.views.overview import OverviewTable
from krex_console.widgets import FIELD, FilterInput, KeysFooter, StatusBar
from krex_runtime.wire.state.model import GpuState

RENDER_EVERY_S = 0.1  # at most 10 repaints a second, however fast events come
AGE_EVERY_S = 1.0  # live hold times and run times tick even with no events
REPLAY_ACTIONS = frozenset({"toggle_play", "step", "faster", "slower", "seek", "jump"})
FILTERABLE_TABS: dict[str, type[CommandsTable | EventsTable]] = {"commands": CommandsTable, "events": EventsTable}


class KrexConsole(App[None]):
    TITLE = "krex-console"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    DataTable { height: 1fr; }
    #overview-summary { height: auto; max-height: 50%; border: round $accent; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        # The tabs show 1 2 3 already: the footer keeps its room for ? and q.
        Binding("1", "show_tab('overview')", "Overview", show=False),
        Binding("2", "show_tab('commands')", "Commands", show=False),
        Binding("3", "show_tab('events')", "Events", show=False),
        Binding("e", "evaluations", "Evals", show=False),
        Binding("slash", "filter", "Filter"),
        Binding("question_mark", "help", "Help"),
        Binding("escape", "back", "Back", show=False),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("space", "toggle_play", "Play"),
        Binding("n", "step", "Step"),
        Binding("plus,equals_sign", "faster", "Fast"),
        Binding("minus", "slower", "Slow"),
        Binding("g", "seek", "Seek"),
        Binding("left_square_bracket", "jump(-10)", "-10 s", show=False),
        Binding("right_square_bracket", "jump(10)", "+10 s", show=False),
        # A view's action key that may not act falls through to these: they say why.
        Binding("l", "why_not('lease')", show=False),
        Binding("u", "why_not('release')", show=False),
        Binding("c", "why_not('recycle')", show=False),
        Binding("p", "why_not('toggle_admission')", show=False),
        Binding("ctrl+k", "why_not('kill')", show=False),
    ]
    INITIAL_TAB = "overview"
    TABLES: ClassVar[dict[str, Any]] = {"overview": OverviewTable, "commands": CommandsTable, "events": EventsTable}

    def __init__(
        self,
        control: str | None = None,
        telemetry: str | None = None,
        read_only: bool = False,
        replay: ReplayFeed | Any | None = None,  # a ReplayFeed, or what answers as one (ClusterReplayFeed)
    ) -> None:
        super().__init__()
        self.model = ConsoleModel()
        self.read_only = read_only
        self.replay = replay
        if replay is not None:
            replay.post = self.post_message
        self.control_endpoint = None if replay is not None else control
        self.live: LiveFeed | None = None
        if replay is None and telemetry is not None:  # (a cluster console starts one per node it opens)
            assert control is not None
            self.live = LiveFeed(control, telemetry, self.post_message)
        self.status = FeedStatus.REPLAY if replay is not None else FeedStatus.CONNECTING
        self.status_detail = ""
        self.last_outcome: actions.ActionOutcome | None = None
        self.renders = 0
        self._dirty = True
        self._last_render = 0.0

    # --- layout ---------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(self.status_text())
        with TabbedContent(initial=self.INITIAL_TAB, id="tabs"):
            yield from self.compose_panes()
            with TabPane("1 Overview", id="overview"), Vertical():
                yield OverviewTable(self.model, gate=self)
                yield Static(id="overview-summary")
            with TabPane("2 Commands", id="commands"), Vertical():
                yield FilterInput(placeholder="filter: words, state:running, gpu:1 (Enter keeps, Esc clears)",
                                  id="commands-filter")
                yield CommandsTable(self.model, gate=self)
            with TabPane("3 Events", id="events"), Vertical():
                yield FilterInput(placeholder="filter: words, e.g. region gpu:1 (Enter keeps, Esc clears)",
                                  id="events-filter")
                yield EventsTable()
        yield KeysFooter()

    def compose_panes(self) -> ComposeResult:
        """Panes before the node's own (a cluster console's Nodes view)."""
        yield from ()

    def on_mount(self) -> None:
        feed = self.replay if self.replay is not None else self.live
        if feed is not None:
            self.run_worker(feed.run(), name="feed", group="feed", exclusive=True)
        self.set_interval(RENDER_EVERY_S, self._render_tick)
        self._focus_table(self.INITIAL_TAB)

    # --- the feed -------------------------------------------------------------

    def on_state_changed(self, message: StateChanged) -> None:
        if message.node != self.model.node:
            return  # a cluster node's feed that was left, its last post still queued
        m = self.model
        m.state, m.log = message.state, message.log
        m.now = message.now if self.replay is not None else time.time()
        m.history.sample(m.state)
        self._dirty = True

    def on_feed_status_changed(self, message: FeedStatusChanged) -> None:
        self.status, self.status_detail = message.status, message.detail
        if message.read_only and not self.read_only:
            self.read_only = True  # the runtime says this socket is read-only: hide the actions too
            self.refresh_bindings()
        self._dirty = True

    def _render_tick(self) -> None:
        if not self.screen_stack:
            return  # the timer's last tick can land after exit has taken every screen down
        if self.replay is None and time.monotonic() - self._last_render >= AGE_EVERY_S:
            self.model.now = self.model.cluster_now = time.time()
            self._dirty = True
        if self._dirty:
            self.refresh_views()

    def refresh_views(self) -> None:
        self._dirty = False
        self._last_render = time.monotonic()
        self.renders += 1
        for bar in self.screen.query(StatusBar):
            bar.update(self.status_text())
        screen = self.screen
        if isinstance(screen, (GpuDetailScreen, CommandDetailScreen, EvaluationsScreen)):
            screen.refresh_from(self.model)
            return
        if screen is not self.screen_stack[0]:
            return  # a dialog is open: the views refresh when it closes
        try:
            active = self.query_one("#tabs", TabbedContent).active
            table = self.TABLES.get(active)
            if table is not None:
                self.query_one(table).refresh_from(self.model)
            if active == "overview":
                self.refresh_overview_summary()
        except NoMatches:
            # The render timer can fire while the views are still being mounted
            # or already taken down (start-up, exit): nothing to draw this tick.
            self._dirty = True

    def refresh_overview_summary(self) -> None:
        self._show_summary(self.query_one(OverviewTable).selected_gpu())

    def _show_summary(self, gpu: GpuState | None) -> None:
        text = summarize_gpu(self.model, gpu) if gpu is not None else "no GPU yet"
        try:
            self.query_one("#overview-summary", Static).update(text)
        except NoMatches:
            pass  # a highlight that arrives while the overview is being mounted or taken down

    def on_gpu_highlighted(self, message: GpuHighlighted) -> None:
        self._show_summary(gpu_by_uuid(self.model.state, message.uuid) if message.uuid else None)

    def status_text(self) -> str:
        s = self.model.state
        totals = s.totals
        running = sum(tenants_of(s, g)[0] for g in s.gpus.values())  # the canaries take no slot
        slots = sum(g.slots for g in s.gpus.values())
        done = sum(totals.get(k, 0) for k in ("finished", "timeout", "cancelled", "failed"))
        # Fields (FIELD between them: where a narrow header goes on to a second line, never cutting one).
        node = FIELD.join([
            f"node [b]{s.node or '?'}[/b]", f"policy {s.policy or '?'}", f"seq {s.seq}", f"GPUs {len(s.gpus)}",
            f"running {running}/{slots}", f"queued {len(s.queue)}", f"done {done}",
            *(["[b red]NODE PAUSED[/]"] if s.paused else []), *(["[b red]STOPPING[/]"] if s.stopping else []),
        ])
        if self.replay is not None:
            return f"[b reverse] REPLAY [/] {self.replay.describe()}{FIELD}{node}"
        status = self.status
        age = self.feed_age()
        if status == FeedStatus.LIVE and self.live is not None and age >= self.live.stale_after_s:
            status = FeedStatus.STALE  # the feed has not said so yet (it may be the one that is stuck)
        badge = {
            FeedStatus.LIVE: "[b green]● LIVE[/]",
            FeedStatus.CONNECTING: "[b yellow]◌ CONNECTING[/]",
            FeedStatus.STALE: f"[b yellow]◌ STALE {fmt.duration(age)}[/] (no telemetry since)",
            FeedStatus.DISCONNECTED: f"[b red]✖ DISCONNECTED[/] ({self.status_detail}; retrying)",
        }.get(status, status)
        return f"{badge}{FIELD + '[b magenta]READ-ONLY[/]' if self.read_only else ''}{FIELD}{node}"

    def feed_age(self) -> float:
        """Seconds since the live feed last heard from the runtime (0 in replay)."""
        return time.monotonic() - self.live.last_message_mono if self.live is not None else 0.0

    # --- navigation -------------------------------------------------------------

    def action_show_tab(self, tab: str) -> None:
        if self.screen is not self.screen_stack[0]:
            return
        self.query_one("#tabs", TabbedContent).active = tab
        self._focus_table(tab)
        self.refresh_views()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id:
            self._focus_table(event.pane.id)
        self._dirty = True

    def _focus_table(self, tab: str) -> None:
        self.query_one(self.TABLES[tab]).focus()

    def on_open_gpu(self, message: OpenGpu) -> None:
        self.push_screen(GpuDetailScreen(message.uuid, self.model, gate=self, status=self.status_text()))

    def on_open_command(self, message: OpenCommand) -> None:
        self.push_screen(CommandDetailScreen(message.command_id, self.model, gate=self,
                                             endpoint=self.control_endpoint, status=self.status_text()))

    def action_evaluations(self) -> None:
        if self.screen is self.screen_stack[0]:
            self.push_screen(EvaluationsScreen(self.model, status=self.status_text()))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_filter(self) -> None:
        if self.screen is not self.screen_stack[0]:
            return
        tab = self.query_one("#tabs", TabbedContent).active
        if tab not in FILTERABLE_TABS:
            self.action_show_tab("commands")
            tab = "commands"
        box = self.query_one(f"#{tab}-filter", FilterInput)
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if isinstance(event.input, FilterInput):
            tab = (event.input.id or "").removesuffix("-filter")
            self.query_one(FILTERABLE_TABS[tab]).query_text = event.value
            self._dirty = True

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if isinstance(event.input, FilterInput):
            tab = (event.input.id or "").removesuffix("-filter")
            if not event.value:
                event.input.remove_class("shown")
            self._focus_table(tab)

    async def action_back(self) -> None:
        """Esc: close a filter (clearing it), else leave a detail screen."""
        if self.screen is not self.screen_stack[0]:
            self.pop_screen()
            return
        for box in self.query(FilterInput):
            if box.has_class("shown"):
                box.value = ""
                box.remove_class("shown")
                tab = (box.id or "").removesuffix("-filter")
                self.query_one(FILTERABLE_TABS[tab]).query_text = ""
                self._focus_table(tab)
                self._dirty = True

    # --- actions: gated in the UI here, and again by the runtime ------------------

    @property
    def actions_allowed(self) -> bool:
        """The views' ActionGate: whether changing actions are offered."""
        return self.replay is None and not self.read_only and self.control_endpoint is not None

    def allows(self, action: str, target: object) -> bool:
        """The views' ActionGate: every action that applies can be sent (one node)."""
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in REPLAY_ACTIONS:
            return self.replay is not None
        if action in actions.CHANGING_ACTIONS:
            return self.actions_allowed
        return True

    def action_why_not(self, action: str) -> None:
        """An action key pressed where the action does nothing: say why, in
        one notice (the view hid the key: replay, read-only, no target, or
        the target does not take it now)."""
        self.notify(self.why_not(action), severity="warning")

    def why_not(self, action: str) -> str:
        if self.replay is not None:
            return "replay: a trace cannot be acted on (actions are off)"
        if not self.actions_allowed:
            return "read-only: actions are off (this console watches through the read-only socket)"
        selected = "selected_command" if action == "kill" else "selected_gpu"
        node: Any = self.focused
        while node is not None and not hasattr(node, selected):
            node = node.parent
        if node is None and hasattr(self.screen, selected):
            node = self.screen
        if node is None:
            where = "command (2: commands)" if action == "kill" else "GPU (1: overview)"
            return f"{action.replace('_', ' ')} acts on the selected {where}: select one first"
        target = getattr(node, selected)()
        if target is None:
            return f"no {'command' if action == 'kill' else 'GPU'} selected"
        why = actions.why_not_command(action, target) if action == "kill" else actions.why_not_gpu(action, target)
        return why or f"{action.replace('_', ' ')} is not offered here"

    def on_request_action(self, message: RequestAction) -> None:
        self.confirm_and_perform(message.action)

    def confirm_and_perform(self, plan: actions.PlannedAction) -> None:
        if not self.actions_allowed:  # bindings are hidden; this guards the palette and callers
            self.notify("actions are off in read-only mode and in replay", severity="warning")
            return

        def answered(confirmed: bool | None) -> None:
            if confirmed:
                self.perform(plan)
            else:
                self.notify(f"cancelled: {plan.question}", timeout=2)

        self.push_screen(ConfirmDialog(plan), answered)

    def perform(self, plan: actions.PlannedAction) -> None:
        """Send the request in a worker of its own: a lease may wait minutes for
        its region, and must neither freeze the screen nor hold up quitting
        (the worker is cancelled with the app)."""
        endpoint = self.control_endpoint
        assert endpoint is not None
        if plan.request == "lease":
            self.notify(f"{plan.title} {plan.target}: waiting for its region…", timeout=4)
        self.run_worker(self._perform(endpoint, plan), name=f"krex-action-{plan.request}", group="actions",
                        exit_on_error=False)

    async def _perform(self, endpoint: str, plan: actions.PlannedAction) -> None:
        self._action_done(await actions.perform(endpoint, plan))

    def _action_done(self, outcome: actions.ActionOutcome) -> None:
        self.last_outcome = outcome
        self.notify(outcome.message, severity="information" if outcome.ok else "error",
                    timeout=4 if outcome.ok else 10)

    # --- replay -------------------------------------------------------------------

    def action_toggle_play(self) -> None:
        if self.replay is not None:
            self.replay.toggle_pause()

    def action_step(self) -> None:
        if self.replay is not None:
            self.replay.step()

    def action_faster(self) -> None:
        if self.replay is not None:
            self.replay.set_speed(self.replay.speed * 2)

    def action_slower(self) -> None:
        if self.replay is not None:
            self.replay.set_speed(self.replay.speed / 2)

    def action_jump(self, seconds: float) -> None:
        if self.replay is not None:
            self.replay.seek(self.replay.clock + seconds)

    def action_seek(self) -> None:
        replay = self.replay
        if replay is None:
            return

        def chosen(offset: float | None) -> None:
            if offset is not None:
                replay.seek_offset(offset)

        self.push_screen(SeekDialog(replay.end - replay.start), chosen)

    # --- command palette ------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Overview", "The node overview: a row per GPU", lambda: self.action_show_tab("overview"))
        yield SystemCommand("Commands", "Commands, filterable and sortable", lambda: self.action_show_tab("commands"))
        yield SystemCommand("Events", "The audit log of events", lambda: self.action_show_tab("events"))
        yield SystemCommand("Evaluations", "krex eval's batches and pairs", self.action_evaluations)
        if self.replay is not None:
            yield SystemCommand("Replay: play / pause", "Play or pause the trace", self.action_toggle_play)
            yield SystemCommand("Replay: step", "Apply one more event", self.action_step)
            yield SystemCommand("Replay: seek", "Go to a time in the trace", self.action_seek)
        if self.actions_allowed:  # only the actions that apply to each GPU as it is now
            for gpu in list(self.model.state.gpus.values()):
                for plan in actions.gpu_actions(gpu):
                    yield SystemCommand(f"{plan.title} {plan.target}", plan.detail,
                                        lambda plan=plan: self.confirm_and_perform(plan))
