"""The console on an 80x24 terminal (and a 160x45 one), driven with Textual's
pilot: the help fits whole, the header's counts are never cut, the overview
has its admission column, a replayed command's detail shows its record, and
a cancelled command's output pane says how it ended, not `exit None`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from console_helpers import live_app, rendered, run_async, screen_text, settled_screen, submit, wait_for
from rich.text import Text
from textual.widgets import Log

from krex_console.dialogs import HELP_TEXT, HelpScreen
from krex_console.feed import FeedStatus
from krex_console.main import build_parser, make_app
from krex_console.views.command_list import CommandDetailScreen, CommandsTable
from krex_runtime.testing.local_runtime import Runtime

TRACE = Path(__file__).parent / "data" / "small-trace.jsonl"
SIZES = [(80, 24), (160, 45)]
IDS = ["80x24", "160x45"]


def replayed(at: float = 0.9) -> Any:
    """`krex-console --replay TRACE --paused --at S`, as the command line makes it."""
    return make_app(build_parser().parse_args(["--replay", str(TRACE), "--paused", "--at", str(at)]))


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@run_async
async def test_a_replayed_commands_detail_shows_its_record(size: tuple[int, int]) -> None:
    app = replayed()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0, what="the replayed state")
        await pilot.press("2")
        await wait_for(pilot, lambda: app.query(CommandsTable) and app.query_one(CommandsTable).row_count, what="rows")
        await pilot.press("enter")  # no repaint forced: a paused replay sends no further state
        screen = await wait_for(pilot, lambda: isinstance(app.screen, CommandDetailScreen) and app.screen)
        text = await settled_screen(pilot)
        assert f"{screen.command_id}  sleeper  state running" in text, text
        assert "sleep 30" in text


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@run_async
async def test_help_fits_whole(size: tuple[int, int]) -> None:
    app = replayed()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0, what="the replayed state")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        text = await settled_screen(pilot)
        for line in (Text.from_markup(line).plain.strip() for line in HELP_TEXT.splitlines()):
            assert any(line in row for row in text.splitlines()), f"help line cut or wrapped: {line!r}\n{text}"
        rows = text.splitlines()
        top = next(i for i, row in enumerate(rows) if "Views" in row)
        bottom = next(i for i, row in enumerate(rows) if "this help" in row)
        assert "█▀▀▀" in rows[top - 1] and "█▄▄▄" in rows[bottom + 1], text  # its border, whole


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@run_async
async def test_the_header_counts_and_the_admission_column_are_there(size: tuple[int, int]) -> None:
    app = replayed()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0, what="the replayed state")
        await rendered(pilot)
        text = await settled_screen(pilot)
        for field in ("node node-01", "running 2/6", "queued 0", "done 4"):
            assert field in text, text
        header = next(row for row in text.splitlines() if " GPU " in row)
        assert "Admit" in header.split(), text
        gpu_rows = [row.split() for row in text.splitlines() if row.split()[:1] in (["0"], ["1"]) and "Overview" not in row]
        assert all("open" in row for row in gpu_rows) and len(gpu_rows) == 2, text


@run_async
async def _cancelled_says_its_state(rt: Runtime) -> None:
    app = live_app(rt)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE, what="the live feed")
        victim = submit(rt, ["sleep", "60"], label="victim")
        await wait_for(pilot, lambda: victim in app.model.state.commands, what="the command")
        await pilot.press("2")
        await wait_for(pilot, lambda: app.query(CommandsTable) and app.query_one(CommandsTable).row_count, what="rows")
        await pilot.press("enter")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, CommandDetailScreen) and app.screen)
        assert screen.command_id == victim
        with rt.client() as client:
            client.call("cancel", {"id": victim})
        log = screen.query_one(Log)
        ended = await wait_for(pilot, lambda: next((line for line in log.lines if "(ended:" in line), None), 30,
                               "the end in the output pane")
        assert ended == "(ended: cancelled, signal 15, cancelled by request)", ended
        assert "None" not in screen_text(app)


def test_a_cancelled_commands_output_pane_says_its_state(make_runtime: Any) -> None:
    _cancelled_says_its_state(make_runtime(policy="krex", slots=2))
