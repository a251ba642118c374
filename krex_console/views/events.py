"""Events: the audit log, newest at the bottom, as the runtime recorded them."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text

from krex_console import format as fmt
from krex_console.model import ConsoleModel
from krex_console.views.columns import Column, Row
from krex_console.views.table_sync import FittedTable
from krex_runtime.wire.state.command_states import ended_state

MAX_ROWS = 400  # scrolled back further, the filter or the trace has the rest
TYPE_STYLE = {
    "region_granted": "bold yellow", "region_released": "yellow", "region_requested": "dim yellow",
    "region_withdrawn": "red", "command_finished": "", "command_started": "green", "command_queued": "dim",
    "admission_paused": "bold red", "admission_resumed": "bold green", "runtime_started": "bold cyan",
    "runtime_stopping": "bold red", "runtime_stopped": "bold red",
}
SHOWN_ELSEWHERE = frozenset({"seq", "t", "type", "gpu", "id", "argv"})


def subject(event: dict[str, Any]) -> str:
    """Who or what the event is about, with how it ended where it did: a
    released region's verdict, an ended command's state and exit."""
    if "region" in event:
        verdict = f" {event['verdict']}" if event.get("verdict") else ""
        return f"region {event['region']} t{event.get('tenant_id', '?')}{verdict}"
    if event.get("type") == "command_finished":
        state = ended_state(str(event.get("state", "")), event.get("exit_code"), event.get("signal"))
        code = f" exit {event['exit_code']}" if event.get("exit_code") else ""
        sig = f" signal {event['signal']}" if event.get("signal") else ""
        return f"{event.get('id', '')} {state}{code}{sig}"
    return str(event.get("id", ""))


def subject_cell(event: dict[str, Any]) -> Text:
    """The subject as the row shows it: a released region's verdict in its colour."""
    text = Text(subject(event))
    verdict = event.get("verdict") if "region" in event else None
    if verdict:
        text.stylize(fmt.VERDICT_STYLE.get(str(verdict), ""), len(text) - len(str(verdict)))
    return text


def detail(event: dict[str, Any]) -> str:
    parts = []
    for key, value in event.items():
        if key in SHOWN_ELSEWHERE or key in ("region", "tenant_id", "verdict") or value in (None, "", [], {}):
            continue
        if key == "node" and event.get("type") != "runtime_started":
            continue  # a cluster's tag (relay, merged trace), not a field: the view is that node's already
        if isinstance(value, float):
            value = f"{value:.4g}"
        parts.append(f"{key}={value}")
    argv = event.get("argv")
    if argv:  # a command's; shown as it would be typed, whatever a trace holds
        parts.append(" ".join(map(str, argv)) if isinstance(argv, list) else str(argv))
    text = " ".join(str(p) for p in parts)
    return text if len(text) <= 200 else text[:199] + "…"


def event_matches(event: dict[str, Any], query: str) -> bool:
    haystack = f"{event.get('type')} {subject(event)} gpu:{event.get('gpu')} {detail(event)}".lower()
    return all(word in haystack for word in query.lower().split())


COLUMNS = [
    Column("seq", "Seq", 0, hotkey="Q"),
    Column("t", "Time", 0, hotkey="T"),
    Column("type", "Event", 0, hotkey="E"),
    Column("gpu", "GPU", 1, hotkey="G"),
    Column("subject", "Subject", 2, cap=30, hotkey="S"),
    Column("detail", "Detail", 3, flex=True, hotkey="D", least=20),
]


class EventsTable(FittedTable):
    """The newest MAX_ROWS matching events, oldest at the top. Its cost is
    bounded by the rows shown, whatever the backlog: the log is read from its
    newest end down to what is already shown, each event's row is made once,
    and rows that fall off the top are dropped in one rebuild when many go at
    once (removing rows one at a time costs the whole table each time)."""

    COLUMNS = COLUMNS

    def __init__(self) -> None:
        super().__init__(id="events-table")
        self.query_text = ""
        self._shown_number = 0  # the newest event (its EventLog number) the rows were made from
        self._generation = -1
        self._log: object = None  # the log shown: another one (a cluster's other node) starts afresh
        self._query_shown = ""
        self._events: deque[Row] = deque(maxlen=MAX_ROWS)

    def refresh_from(self, model: ConsoleModel) -> None:
        log = model.log
        # A replay that goes back in time clears its log (a new generation).
        rebuild = log.generation != self._generation or self.query_text != self._query_shown or log is not self._log
        if not rebuild and log.added == self._shown_number:
            return
        fresh: list[tuple[int, dict[str, Any], float | None]] = []
        for number, event, run_start in log.newest_first():
            if not rebuild and number <= self._shown_number:
                break
            if not self.query_text or event_matches(event, self.query_text):
                fresh.append((number, event, run_start))
                if len(fresh) >= MAX_ROWS:
                    break
        self._shown_number = log.added
        if rebuild:
            self._events.clear()
            self.reset_widths()
            self._generation, self._query_shown, self._log = log.generation, self.query_text, log
        follow = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        # An event's time counts from its own run's start: the state's is the
        # latest run's, which the log may not have seen begin (attached mid-run).
        current = model.state.started_at
        self._events.extend(event_row(e, start or current, n) for n, e, start in reversed(fresh))
        self.show(list(self._events))
        if follow and self.row_count and self.sort_column is None:
            self.move_cursor(row=self.row_count - 1, animate=False)


def event_row(event: dict[str, Any], start: float | None, number: int) -> Row:
    """The row of the log's event `number` (EventLog.newest_first)."""
    kind = event.get("type", "")
    gpu = event.get("gpu")
    t = event.get("t", 0.0)
    seq = event.get("seq")  # none on a trace_gap record
    cells = {
        "seq": "-" if seq is None else str(seq),
        "t": fmt.elapsed(t - start) if start else fmt.clock(t),
        "type": Text(kind, style=TYPE_STYLE.get(kind, "")),
        "gpu": "-" if gpu is None else str(gpu),
        "subject": subject_cell(event),
        "detail": detail(event),
    }
    return Row(str(number), cells, {"seq": seq, "t": t, "gpu": gpu})
