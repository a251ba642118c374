"""Events: the audit log, newest at the bottom, as the runtime recorded them."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from krex_console.model import ConsoleModel

MAX_ROWS = 1000
TYPE_STYLE = {
    "region_granted": "bold yellow", "region_released": "yellow", "region_requested": "dim yellow",
    "region_withdrawn": "red", "command_finished": "", "command_started": "green", "command_queued": "dim",
    "admission_paused": "bold red", "admission_resumed": "bold green", "runtime_started": "bold cyan",
    "runtime_stopping": "bold red", "runtime_stopped": "bold red",
}
SHOWN_ELSEWHERE = frozenset({"seq", "t", "type", "gpu", "id", "argv"})


def subject(event: dict[str, Any]) -> str:
    if "region" in event:
        return f"region {event['region']} t{event.get('tenant_id', '?')}"
    return str(event.get("id", ""))


def detail(event: dict[str, Any]) -> str:
    parts = []
    for key, value in event.items():
        if key in SHOWN_ELSEWHERE or key in ("region", "tenant_id") or value in (None, "", [], {}):
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        parts.append(f"{key}={value}")
    argv = event.get("argv")
    if argv:  # a command's; shown as it would be typed, whatever a trace holds
        parts.append(" ".join(map(str, argv)) if isinstance(argv, list) else str(argv))
    text = " ".join(str(p) for p in parts)
    return text if len(text) <= 120 else text[:119] + "…"


def event_matches(event: dict[str, Any], query: str) -> bool:
    haystack = f"{event.get('type')} {subject(event)} gpu:{event.get('gpu')} {detail(event)}".lower()
    return all(word in haystack for word in query.lower().split())


class EventsTable(DataTable[Any]):
    def __init__(self) -> None:
        super().__init__(id="events-table", cursor_type="row", zebra_stripes=True)
        self.query_text = ""
        self._shown_seq = 0
        self._generation = -1
        self._query_shown = ""
        self._follow = True  # keep the newest row in view unless the operator scrolled up

    def on_mount(self) -> None:
        for key, label in (("seq", "Seq"), ("t", "Time"), ("type", "Event"), ("gpu", "GPU"),
                           ("subject", "Subject"), ("detail", "Detail")):
            self.add_column(label, key=key)

    def refresh_from(self, model: ConsoleModel) -> None:
        log = model.log
        rebuild = log.generation != self._generation or self.query_text != self._query_shown
        newest = log.events[-1]["seq"] if log.events else 0
        if newest < self._shown_seq:
            rebuild = True  # replay went back in time
        if rebuild:
            self.clear()
            self._shown_seq = 0
            self._generation, self._query_shown = log.generation, self.query_text
        follow = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        start = model.state.started_at
        added = False
        for event in log.events:
            seq = event.get("seq", 0)
            if seq <= self._shown_seq:
                continue
            self._shown_seq = seq
            if self.query_text and not event_matches(event, self.query_text):
                continue
            kind = event.get("type", "")
            gpu = event.get("gpu")
            self.add_row(
                str(seq), f"+{event.get('t', 0.0) - start:.3f}s" if start else f"{event.get('t', 0.0):.3f}",
                Text(kind, style=TYPE_STYLE.get(kind, "")), "-" if gpu is None else str(gpu),
                subject(event), detail(event), key=str(seq),
            )
            added = True
        while self.row_count > MAX_ROWS:
            self.remove_row(next(iter(self.rows)))
        if added and follow:
            self.move_cursor(row=self.row_count - 1, animate=False)
