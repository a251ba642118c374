"""Commands: filterable, sortable, keyed by command id; Enter drills down to a
command's output tail and region statistics."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Label, Log, Static

from krex_console import format as fmt
from krex_console.messages import OpenCommand
from krex_console.model import ConsoleModel
from krex_console.views.bindings import KILL_BINDING, ActionGate, CommandActions
from krex_console.views.columns import Column, Row
from krex_console.views.table_sync import FittedTable, selected_key
from krex_console.widgets import KeysFooter, StatusBar
from krex_runtime.api import AsyncClient, ProtocolError, RequestFailed, RuntimeUnavailable
from krex_runtime.wire.state.model import CommandInfo

MAX_ROWS = 300  # the newest; the filter finds any other (and the trace has them all)
OUTPUT_LINES = 500

STATE_STYLE = {
    "queued": "yellow", "running": "bold green", "finished": "", "timeout": "bold red",
    "cancelled": "magenta", "failed": "bold red",
}


def _run_s(cmd: CommandInfo, now: float) -> float | None:
    if cmd.started_at is None:
        return None
    return (cmd.finished_at if cmd.finished_at is not None else now) - cmd.started_at


COLUMNS = [  # how it ended (state, exit) and whose it is are never dropped for room
    Column("id", "ID", 0, hotkey="I"),
    Column("label", "Label", 4, cap=24, hotkey="L"),
    Column("state", "State", 0, hotkey="S"),
    Column("gpu", "GPU", 1, hotkey="G"),
    Column("tenant", "Tenant", 1, hotkey="T"),
    Column("run", "Run time", 2, hotkey="R"),
    Column("exit", "Exit", 0, hotkey="E"),
    Column("argv", "Command", 3, flex=True, hotkey="C", least=20),
]
# `s` steps through these (None: newest first, the view's own order).
SORT_CYCLE: list[str | None] = [None, "state", "gpu", "run", "label"]


def matches(cmd: CommandInfo, query: str) -> bool:
    """`state:running gpu:1 cand` — every word must match (field:value or a substring)."""
    for word in query.lower().split():
        field, _, wanted = word.partition(":")
        if wanted and field == "state":
            if not cmd.state.startswith(wanted):
                return False
        elif wanted and field == "gpu":
            if str(cmd.gpu) != wanted:
                return False
        elif word not in f"{cmd.id} {cmd.label} {cmd.state} {' '.join(cmd.argv)}".lower():
            return False
    return True


def command_row(cmd: CommandInfo, now: float) -> Row:
    exit_text = "-" if cmd.exit_code is None and cmd.signal is None else (
        f"sig {cmd.signal}" if cmd.signal else str(cmd.exit_code))
    if cmd.unprotected_timings:  # measurements no region protected
        exit_text = f"{exit_text} unprot {cmd.unprotected_timings}"
    run = _run_s(cmd, now)
    cells = {
        "id": cmd.id,
        "label": cmd.label,
        "state": Text(cmd.state, style=STATE_STYLE.get(cmd.state, "")),
        "gpu": "-" if cmd.gpu is None else str(cmd.gpu),
        "tenant": "-" if cmd.tenant_id is None else f"t{cmd.tenant_id}",
        "run": fmt.duration(run) if run is not None else "-",
        "exit": exit_text,
        "argv": fmt.command_text(cmd.argv),
    }
    order = {"id": (cmd.submitted_at, cmd.id), "gpu": cmd.gpu, "tenant": cmd.tenant_id, "run": run,
             "exit": cmd.exit_code if cmd.signal is None else 128 + cmd.signal}
    return Row(cmd.id, cells, order)


class CommandsTable(CommandActions, FittedTable):
    COLUMNS = COLUMNS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Details"),
        Binding("s", "cycle_sort", "Sort"),
        KILL_BINDING,
    ]

    def __init__(self, model: ConsoleModel, gate: ActionGate) -> None:
        super().__init__(id="commands-table")
        self.model = model
        self.gate = gate
        self.query_text = ""

    @property
    def sort_name(self) -> str:
        return self.sort_column or "newest"

    def refresh_from(self, model: ConsoleModel) -> None:
        """The newest MAX_ROWS commands that match the filter (the filter sees
        them all), in the chosen order."""
        now = model.now
        shown = [c for c in model.state.commands.values() if not self.query_text or matches(c, self.query_text)]
        shown.sort(key=lambda c: (c.submitted_at, c.id), reverse=True)
        self.show([command_row(c, now) for c in shown[:MAX_ROWS]])
        self.offer_actions()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.offer_actions()

    def selected_command(self) -> CommandInfo | None:
        cid = selected_key(self)
        return self.model.state.commands.get(cid) if cid else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        cmd = self.selected_command()
        if cmd is not None:
            self.post_message(OpenCommand(cmd.id))

    def action_cycle_sort(self) -> None:
        at = SORT_CYCLE.index(self.sort_column) if self.sort_column in SORT_CYCLE else 0
        self.sort_column, self.sort_reverse = SORT_CYCLE[(at + 1) % len(SORT_CYCLE)], False
        self.fitted = []
        self.notify(f"commands sorted by {self.sort_name}", timeout=2)
        self.refresh_from(self.model)


def region_summary(model: ConsoleModel, command_id: str) -> str:
    records = model.log.regions_of_command(command_id)
    if not records:
        return "regions: none seen (the console sees regions granted since it connected)"
    def total(key: str) -> float:
        return sum(fmt.number(r.stats.get(key)) or 0.0 for r in records)
    n = len(records)
    return (
        f"regions {n}: hold {fmt.duration(total('hold_s'))} total, wait {fmt.duration(total('wait_s') / n)} mean,"
        f" entry {fmt.duration(total('enter_s') / n)} mean (drain {fmt.duration(total('drain_s') / n)},"
        f" freeze {fmt.duration(total('freeze_s') / n)}), exit thaw {fmt.duration(total('thaw_s') / n)} mean;"
        f" froze {sum(len(r.frozen) for r in records)} tenant(s)"
        f"{verdicts_text(records)}"
    )


def verdicts_text(records: list[Any]) -> str:
    """Its regions' verdicts by count ("; verdicts verified 3, violated 1"); "" before any release."""
    counts: dict[str, int] = {}
    for r in records:
        if r.verdict:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return "; verdicts " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) if counts else ""


def ended_text(result: dict[str, Any]) -> str:
    """How a command ended, for a person: its state, then its exit code, or
    the signal and reason where it has no exit code (a cancelled command)."""
    parts = [str(result.get("state") or "ended")]
    if result.get("exit_code") is not None:
        parts.append(f"exit {result['exit_code']}")
    elif result.get("signal"):
        parts.append(f"signal {result['signal']}")
    if result.get("reason"):
        parts.append(str(result["reason"]))
    return ", ".join(parts)


class CommandDetailScreen(CommandActions, Screen[None]):
    """A command's record, its region statistics and the tail of its output.

    The output comes from `wait` with attach (the output so far, then live
    output until the result), on a connection of its own to `endpoint`; in replay there is none, and a trace holds no output."""

    DEFAULT_CSS = """
    CommandDetailScreen #command-summary { height: auto; padding: 0 1; border: round $accent; }
    CommandDetailScreen Log { height: 1fr; border: round $panel; }
    CommandDetailScreen Label { padding: 0 1; text-style: bold; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back"), KILL_BINDING]

    def __init__(self, command_id: str, model: ConsoleModel, gate: ActionGate, endpoint: str | None,
                 status: str = "", output_id: str | None = None,
                 no_output: str = "(replay: a trace holds no command output)") -> None:
        super().__init__()
        self.command_id = command_id
        self.output_id = output_id or command_id  # what `endpoint` knows it by (a cluster gateway: its own id)
        self.no_output = no_output  # what the output pane says without an endpoint
        self.model = model
        self.gate = gate
        self.endpoint = endpoint
        self.status = status  # the status bar's first text; the app keeps it current
        self.result: dict[str, Any] | None = None
        # Set in on_mount: is_mounted is still False there, and a paused replay
        # sends no later state that would fill the summary in (it stayed blank).
        self._ready = False

    def compose(self) -> ComposeResult:
        yield StatusBar(self.status)
        with Vertical():
            yield Static(id="command-summary")
            yield Label(f"Output of {self.command_id} (last {OUTPUT_LINES} lines)")
            yield Log(id="output", max_lines=OUTPUT_LINES)
        yield KeysFooter()

    def on_mount(self) -> None:
        self._ready = True
        self.refresh_from(self.model)
        if self.endpoint is not None:
            self.follow_output(self.endpoint)
        else:
            self.query_one(Log).write_line(self.no_output)

    def refresh_from(self, model: ConsoleModel) -> None:
        if not self._ready:
            return
        cmd = model.state.commands.get(self.command_id)
        if cmd is None:
            text = f"command {self.command_id}: not in the node's state (it may have aged out)"
        else:
            run = _run_s(cmd, model.now)
            lines = [
                f"[b]{cmd.id}[/b]  {cmd.label}  state {cmd.state}  gpu {'-' if cmd.gpu is None else cmd.gpu}"
                f"  tenant {'-' if cmd.tenant_id is None else cmd.tenant_id}  pid {cmd.pid or '-'}"
                f"  run {fmt.duration(run) if run is not None else '-'}"
                f"  exit {cmd.exit_code if cmd.exit_code is not None else '-'}"
                f"{f'  signal {cmd.signal}' if cmd.signal else ''}{f'  reason {cmd.reason}' if cmd.reason else ''}"
                f"{f'  unprotected timings {cmd.unprotected_timings}' if cmd.unprotected_timings else ''}"
                f"{f'  untracked timings {cmd.untracked_timings}' if cmd.untracked_timings else ''}"
                f"{f'  auto-regions {len(cmd.auto_regions)}' if cmd.auto_regions else ''}",
                fmt.argv_text(cmd.argv, 200),
                region_summary(model, cmd.id),
            ]
            if self.result is not None:
                lines.append(f"stdout {self.result.get('stdout_path') or fmt.NA}"
                             f"  stderr {self.result.get('stderr_path') or fmt.NA}")
            text = "\n".join(lines)
        try:
            summary = self.query_one("#command-summary", Static)
        except NoMatches:  # a tick that lands while the screen is being taken down
            return
        summary.update(text)
        self.offer_actions()  # the kill key goes once the command has ended

    @work(exclusive=True, group="output")
    async def follow_output(self, endpoint: str) -> None:
        """The output so far, then what the command writes until it ends. An
        async worker of the screen: leaving the screen or the app cancels it."""
        try:
            async with AsyncClient(endpoint, timeout=10) as client:
                handle = await client.attach(self.output_id, on_output=lambda _stream, text: self._write(text))
                result = await handle.wait()
        except RequestFailed as exc:
            self._write(f"(no output: {exc.code}: {exc.reason})\n")
            return
        except (RuntimeUnavailable, ProtocolError) as exc:
            self._write(f"\n(output unavailable: {exc})\n")
            return
        self._finished(dict(result.record))

    def _write(self, text: str) -> None:
        if self.is_mounted:
            self.query_one(Log).write(text)

    def _finished(self, result: dict[str, Any]) -> None:
        if not self.is_mounted:
            return
        self.result = result
        self.query_one(Log).write(f"\n(ended: {ended_text(result)})\n")
        self.refresh_from(self.model)

    def selected_command(self) -> CommandInfo | None:
        return self.model.state.commands.get(self.command_id)

    def action_back(self) -> None:
        self.app.pop_screen()
