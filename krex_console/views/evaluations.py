"""Evaluations (`krex eval`): per batch, how far it has come and how its
candidates fared; per pair, what failed, the times, and whether the times
can be trusted.

A command is part of batch B when its label is `eval:B/<problem>/<candidate>`
(the evaluator labels them so); its outcome is the `evaluation` its result
line gave the runtime (wire/evaluation_record.py). The trust shown here is
what the node state holds: the verdict and integrity record of each region
the harness named, the harness's own patch list and fresh check. (The
client's `trusted` rule, `krex eval`, also compares the times from below;
where the integrity record carries them this view does too.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Static

from krex_console import format as fmt
from krex_console.messages import OpenCommand
from krex_console.model import ConsoleModel
from krex_console.views.columns import Column, Row
from krex_console.views.table_sync import FittedTable, selected_key
from krex_console.widgets import KeysFooter, StatusBar
from krex_runtime.wire.evaluation import TIMER_TOLERANCE  # the client's trusted rule's: one tolerance
from krex_runtime.wire.evaluation_record import outcome
from krex_runtime.wire.printable import printable
from krex_runtime.wire.state.model import CommandInfo, NodeState

PREFIX = "eval:"
ENDED = ("finished", "failed", "cancelled", "timeout")


def label_parts(label: str) -> tuple[str, str, str] | None:
    """`eval:B/P/C` -> (B, P, C); None for any other label."""
    if not label.startswith(PREFIX):
        return None
    batch, _, rest = label[len(PREFIX):].partition("/")
    problem, _, candidate = rest.partition("/")
    return (batch, problem, candidate) if batch else None


def doubts(cmd: CommandInfo) -> list[str]:
    """Why a pair's times are not to be trusted ([] when nothing says so)."""
    evaluation = cmd.evaluation if isinstance(cmd.evaluation, dict) else None
    if evaluation is None:
        return ["no result"]
    found = []
    medians = {"reference": evaluation.get("reference_ms"), "candidate": evaluation.get("candidate_ms")}
    ids = evaluation.get("regions") or []
    records = {r.get("region"): r for r in cmd.regions if isinstance(r, dict)}
    for side, region in zip(("reference", "candidate"), ids, strict=False):
        if region is None:
            found.append(f"{side} timed outside a region")
            continue
        record = records.get(region)
        if record is None:
            found.append(f"region {region} not seen")
            continue
        if record.get("verdict") != "verified":
            found.append(f"region {region} {record.get('verdict') or 'without a verdict'}")
        integrity = record.get("integrity")
        if not isinstance(integrity, dict) or integrity.get("clean") is not True:
            found.append(f"region {region} integrity {'none' if not isinstance(integrity, dict) else 'not clean'}")
        else:
            found += _timer_doubt(region, integrity.get("timing"), medians[side])
    if evaluation.get("correct") is True and not ids:
        found.append("not timed")
    if evaluation.get("harness_patched"):
        found.append("harness patched: " + ", ".join(map(str, evaluation["harness_patched"][:3])))
    if evaluation.get("correct") is True and evaluation.get("fresh_check") is not True:
        found.append("fresh check " + ("failed" if evaluation.get("fresh_check") is False else "missing"))
    return found


def _timer_doubt(region: Any, below: Any, median: Any) -> list[str]:
    if not isinstance(below, dict) or not isinstance(median, (int, float)):
        return []
    from_below = below.get("median_ms")
    if isinstance(from_below, (int, float)) and median > 0 and abs(from_below - median) > TIMER_TOLERANCE * median:
        return [f"region {region} timer mismatch ({median:.4g} vs {from_below:.4g} ms from below)"]
    return []


@dataclass
class Batch:
    name: str
    commands: list[CommandInfo] = field(default_factory=list)

    def count(self, *states: str) -> int:
        return sum(1 for c in self.commands if c.state in states)

    @property
    def correct(self) -> list[CommandInfo]:
        return [c for c in self.commands if isinstance(c.evaluation, dict) and c.evaluation.get("correct") is True]

    @property
    def fast_1(self) -> int:
        return sum(1 for c in self.correct if _speedup(c) is not None and (_speedup(c) or 0) > 1.0)

    @property
    def untrusted(self) -> int:
        return sum(1 for c in self.correct if doubts(c))


def batches(state: NodeState) -> dict[str, Batch]:
    found: dict[str, Batch] = {}
    for cmd in state.commands.values():
        parts = label_parts(cmd.label)
        if parts is not None:
            found.setdefault(parts[0], Batch(parts[0])).commands.append(cmd)
    return found


def _speedup(cmd: CommandInfo) -> float | None:
    value = cmd.evaluation.get("speedup") if isinstance(cmd.evaluation, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def batch_row(batch: Batch) -> Row:
    total = len(batch.commands)
    ended = batch.count(*ENDED)
    cells = {
        "batch": Text(printable(batch.name)), "done": f"{ended}/{total}", "running": str(batch.count("running")),
        "queued": str(batch.count("queued")), "correct": str(len(batch.correct)),
        "fast": f"{batch.fast_1}/{total}",
        "untrusted": Text(str(batch.untrusted), style="bold red" if batch.untrusted else ""),
    }
    order = {"done": ended / total if total else 0, "correct": len(batch.correct), "fast": batch.fast_1,
             "untrusted": batch.untrusted}
    return Row(batch.name, cells, order)


def pair_row(cmd: CommandInfo) -> Row:
    _, problem, candidate = label_parts(cmd.label) or ("", "", "")
    evaluation = cmd.evaluation if isinstance(cmd.evaluation, dict) else None
    result = outcome(evaluation) if evaluation is not None else ("-" if cmd.state in ("queued", "running") else "no result")
    trust = "-" if evaluation is None or evaluation.get("correct") is not True else ("doubt" if doubts(cmd) else "ok")
    speedup = _speedup(cmd)
    cells = {
        "problem": Text(printable(problem)), "candidate": Text(printable(candidate)), "state": cmd.state,
        "outcome": Text(printable(result)),
        "trust": Text(trust, style="bold red" if trust == "doubt" else ""),
    }
    return Row(cmd.id, cells, {"outcome": speedup if speedup is not None else result})


def pair_detail(cmd: CommandInfo | None) -> Text:
    """A pair's errors, times, regions' verdicts and integrity, and what makes it doubtful."""
    if cmd is None:
        return Text("no pair selected")
    _, problem, candidate = label_parts(cmd.label) or ("", "", "")
    lines = [f"{problem} / {candidate}  {cmd.state}  command {cmd.id}"
             f"  exit {'-' if cmd.exit_code is None else cmd.exit_code}{f'  {cmd.reason}' if cmd.reason else ''}"]
    evaluation = cmd.evaluation if isinstance(cmd.evaluation, dict) else None
    if evaluation is None:
        lines.append("no result line (yet)" if cmd.state in ("queued", "running") else "no result line: see its output")
        return Text("\n".join(printable(line) for line in lines))
    lines.append(f"{outcome(evaluation)}  compiled {fmt.NA if evaluation.get('compiled') is None else evaluation['compiled']}"
                 f"  correct {fmt.NA if evaluation.get('correct') is None else evaluation['correct']}")
    if evaluation.get("failure"):
        lines.append(f"{evaluation['failure']}: {evaluation.get('message') or ''}")
    records = {r.get("region"): r for r in cmd.regions if isinstance(r, dict)}
    for side, region in zip(("reference", "candidate"), evaluation.get("regions") or [], strict=False):
        median = evaluation.get(f"{side}_ms")
        record = records.get(region, {})
        integrity = record.get("integrity")
        clean = fmt.NA if not isinstance(integrity, dict) else ("clean" if integrity.get("clean") is True else "not clean")
        lines.append(f"{side} {fmt.NA if not isinstance(median, (int, float)) else f'{median:.4g} ms'}"
                     f"  region {fmt.NA if region is None else region} {record.get('verdict') or fmt.NA}, integrity {clean}")
    found = doubts(cmd)
    lines.append("trust: " + ("; ".join(found) if found else "nothing against it"))
    return Text("\n".join(printable(line) for line in lines))


BATCH_COLUMNS = [
    Column("batch", "Batch", 0, flex=True, least=8, hotkey="B"),
    Column("done", "Done", 0, hotkey="D"),
    Column("running", "Run", 2),
    Column("queued", "Queue", 3),
    Column("correct", "Correct", 0, hotkey="C"),
    Column("fast", "fast_1", 0, hotkey="F"),
    Column("untrusted", "Untrusted", 0, hotkey="U"),
]
PAIR_COLUMNS = [
    Column("problem", "Problem", 0, flex=True, least=10, hotkey="P"),
    Column("candidate", "Candidate", 1, cap=24, hotkey="N"),
    Column("state", "State", 2, hotkey="S"),
    Column("outcome", "Outcome", 0, hotkey="O"),
    Column("trust", "Trust", 0, hotkey="T"),
]


class BatchesTable(FittedTable):
    COLUMNS = BATCH_COLUMNS


class PairsTable(FittedTable):
    COLUMNS = PAIR_COLUMNS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Command")]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = selected_key(self)
        if key:
            self.post_message(OpenCommand(key))


class EvaluationsScreen(Screen[None]):
    """The batches, the pairs of the highlighted batch, the highlighted pair's detail."""

    DEFAULT_CSS = """
    EvaluationsScreen BatchesTable { height: auto; max-height: 8; }
    EvaluationsScreen PairsTable { height: 1fr; }
    EvaluationsScreen #pair-detail { height: auto; max-height: 8; border: round $accent; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back"), Binding("tab", "switch", "Pairs")]

    def __init__(self, model: ConsoleModel, status: str = "") -> None:
        super().__init__()
        self.model = model
        self.status = status
        self._ready = False

    def compose(self) -> ComposeResult:
        yield StatusBar(self.status)
        with Vertical():
            yield BatchesTable(id="eval-batches")
            yield PairsTable(id="eval-pairs")
            yield Static(id="pair-detail")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._ready = True
        self.refresh_from(self.model)
        self.query_one(BatchesTable).focus()

    def refresh_from(self, model: ConsoleModel) -> None:
        if not self._ready:
            return
        try:
            table, pairs, detail = self.query_one(BatchesTable), self.query_one(PairsTable), self.query_one(
                "#pair-detail", Static)
        except NoMatches:  # a tick that lands while the screen is being taken down
            return
        found = batches(model.state)
        table.show([batch_row(b) for b in sorted(found.values(), key=lambda b: b.name)])
        batch = found.get(selected_key(table) or "")
        commands = sorted(batch.commands, key=lambda c: c.label) if batch is not None else []
        pairs.show([pair_row(c) for c in commands])
        if not found:
            detail.update(Text("no evaluations: commands labelled eval:<batch>/<problem>/<candidate> (krex eval)"))
            return
        detail.update(pair_detail(model.state.commands.get(selected_key(pairs) or "")))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_from(self.model)

    def action_switch(self) -> None:
        batches_table, pairs = self.query_one(BatchesTable), self.query_one(PairsTable)
        (pairs if batches_table.has_focus else batches_table).focus()

    def action_back(self) -> None:
        self.app.pop_screen()
