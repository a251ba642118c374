"""Columns that fit, with long values, at 80x24 and 120x40; sorting on every
tab; a backlog of 100k events that never stalls a view switch.

The node is synthetic (benchmarks/console_frame.py makes its trace): long
GPU names, 5-digit sequence numbers, 140 GiB memory figures, conda-style
interpreter paths, a canary beside full slots.
"""

from __future__ import annotations

import time

import pytest
from console_helpers import (
    TerminalCopy,
    check_snapshot,
    console_frame,
    rendered,
    run_async,
    screen_text,
    settled_screen,
    wait_for,
)
from test_console_replay import SNAPSHOTS

from krex_console import format as fmt
from krex_console.app import KrexConsole
from krex_console.feed import ReplayFeed
from krex_console.views.columns import width_of
from krex_console.views.command_list import CommandsTable
from krex_console.views.events import EventsTable
from krex_console.views.gpu_detail import GpuDetailScreen, RegionsTable, TenantsTable
from krex_console.views.overview import OverviewTable
from krex_console.views.table_sync import FittedTable
from krex_runtime.wire.trace.jsonl import Trace

SIZES = [(80, 24), (120, 40)]
# The overview's columns each size must show (by priority), whatever the values.
# At 80 columns, what holds other tenants back (frozen, parked, draining, a
# lease) before the telemetry: the panel below the table has that.
MUST_SHOW = {
    80: {"gpu", "holder", "region_queue", "running", "parked", "draining", "frozen", "lease", "admission", "inflation"},
    120: {"gpu", "holder", "hold", "region_queue", "admission_queue", "running", "inflation", "util", "memory",
          "frozen", "admission", "sm_clock", "lease", "parked", "draining"},
}
# The Commands view at any size: how each ended and whose it is.
COMMANDS_MUST_SHOW = {"id", "state", "exit", "tenant", "gpu"}


def synthetic_app(events: int, gpus: int, at: int | None = None, checkpoint_every: int = 500) -> KrexConsole:
    header, evs = console_frame.synthetic_events(events, gpus)
    feed = ReplayFeed(Trace(header, evs), checkpoint_every=checkpoint_every)
    feed.paused = True
    feed.seek_event(at if at is not None else events)
    return KrexConsole(replay=feed)


def assert_uncut(table: FittedTable) -> None:
    """Every column it shows, but the elastic one and those with a cap, holds
    its widest cell whole; and the columns fit the table's width."""
    assert table._rows is not None
    for column, width in table.fitted:
        if column.flex or column.cap:
            continue
        for row in table._rows:
            cell = row.cells.get(column.key, "")
            assert width_of(cell) <= width, f"{type(table).__name__}.{column.key} cuts {cell!r} to {width}"
    assert sum(w + 2 for _, w in table.fitted) <= table.room() + 2, [(c.key, w) for c, w in table.fitted]


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
@run_async
async def test_long_values_fit_both_sizes(size: tuple[int, int]) -> None:
    app = synthetic_app(12_400, 4)
    tag = f"{size[0]}x{size[1]}"
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq >= 12_000, what="the replayed state")
        await rendered(pilot)
        overview = app.query_one(OverviewTable)
        shown = {c.key for c, _ in overview.fitted}
        assert MUST_SHOW[size[0]] <= shown, MUST_SHOW[size[0]] - shown
        assert_uncut(overview)
        # The canary runs beside full slots: the Run column never reads more than the slots.
        for row in overview._rows or []:
            tenants, slots = row.cells["running"].split()[0].split("/")
            assert int(tenants) <= int(slots) and row.cells["running"].endswith(" +c"), row.cells["running"]
        text = await settled_screen(pilot)
        footer = text.splitlines()[-1]
        # Every key of the replay, whole, at 80 columns too.
        for key in ("? Help", "q Quit", "space Play", "n Step", "+ Fast", "- Slow", "g Seek"):
            assert key in footer, footer
        check_snapshot(SNAPSHOTS, f"long-overview-{tag}", text)

        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), what="the GPU detail")
        await rendered(pilot)
        for table in (app.screen.query_one(TenantsTable), app.screen.query_one(RegionsTable)):
            assert_uncut(table)
        text = await settled_screen(pilot)
        assert "SM clock" in text and "queue depth" in text
        # The GPU's panel keeps its inflation, telemetry and pool lines, each whole.
        for line in ("+2.0%/+2.0%", "util 60%", "pool off", "GPU memory by process"):
            assert line in text, f"{line!r} not on the screen:\n{text}"
        assert "Verdict" in text
        assert "g Seek" in text.splitlines()[-1]
        check_snapshot(SNAPSHOTS, f"long-gpu-detail-{tag}", text)

        await pilot.press("escape", "2")
        await rendered(pilot)
        commands = app.query_one(CommandsTable)
        assert_uncut(commands)
        assert {c.key for c, _ in commands.fitted} >= COMMANDS_MUST_SHOW
        text = await settled_screen(pilot)
        assert "/opt/conda" not in text and "agent.candidates.run --prob" in text
        check_snapshot(SNAPSHOTS, f"long-commands-{tag}", text)

        await pilot.press("3")
        await rendered(pilot)
        events = app.query_one(EventsTable)
        assert_uncut(events)
        text = await settled_screen(pilot)
        assert " 12400 " in text and "+12.4" in text  # 5-digit seq whole, time with its unit
        check_snapshot(SNAPSHOTS, f"long-events-{tag}", text)


@run_async
async def test_sort_by_any_column_on_every_tab() -> None:
    app = synthetic_app(3_000, 4)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0)
        await rendered(pilot)
        overview = app.query_one(OverviewTable)
        await pilot.press("T")  # shift+t: by utilisation
        await rendered(pilot)
        utils = [fmt.number(g.telemetry.get("util_pct")) for g in
                 sorted(app.model.state.gpus.values(), key=lambda g: g.telemetry.get("util_pct"))]
        keys = [r.key.value for r in overview.ordered_rows]
        assert [fmt.number(app.model.state.gpus[i].telemetry.get("util_pct"))
                for i in (next(g.index for g in app.model.state.gpus.values() if g.uuid == k) for k in keys)] == utils
        await pilot.press("T")  # again: reversed
        await rendered(pilot)
        assert [r.key.value for r in overview.ordered_rows] == keys[::-1]
        overview.move_cursor(row=0)
        await pilot.press("j", "j", "k")  # vi keys move the cursor
        assert overview.cursor_row == 1
        for tab, table_type, key in (("2", CommandsTable, "R"), ("3", EventsTable, "Q")):
            await pilot.press(tab)
            await rendered(pilot)
            table = app.query_one(table_type)
            before = [r.key.value for r in table.ordered_rows]
            await pilot.press(key, key)  # by run time / seq, reversed
            await rendered(pilot)
            assert table.sort_reverse and table.sort_column is not None
            after = [r.key.value for r in table.ordered_rows]
            assert sorted(after) == sorted(before) and after != before
        # A click on a header sorts too.
        events = app.query_one(EventsTable)
        x = sum(width + 2 for _, width in events.fitted[:2]) + 2  # inside the third header, "Event"
        await pilot.click(EventsTable, offset=(x, 0))
        await pilot.pause()
        assert events.sort_column == "type" and not events.sort_reverse


@pytest.mark.timeout(300)
@run_async
async def test_100k_events_while_switching_views() -> None:
    """The backlog grows to 100k events (16 GPUs) while the operator switches
    to the next view (the GPU detail among them) every 2000 events; each
    switch comes back, within the test's time limit (the row-at-a-time Events
    table took minutes per switch here). The slowest frame and switch are
    printed, not asserted: this machine's load is not the console's speed
    (docs/BENCHMARKS.md, "Console frame time", measures it)."""
    total, frame, switch = 100_000, 2000, 2000
    app = synthetic_app(total, 16, at=0, checkpoint_every=10 * total)
    app.animation_level = "none"
    feed = app.replay
    assert feed is not None
    slowest = {"frame": 0.0, "switch": 0.0}
    views = ["1", "2", "3", "2", "gpu"]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for at in range(frame, total + 1, frame):
            feed.seek_event(at)
            started = time.monotonic()
            kind = "switch" if at % switch == 0 else "frame"
            if kind == "frame":
                app.refresh_views()
            elif views[at // switch % len(views)] == "gpu":
                await pilot.press("1", "enter")
                await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), what="the GPU detail")
                app.refresh_views()
            else:
                if isinstance(app.screen, GpuDetailScreen):
                    await pilot.press("escape")
                await pilot.press(views[at // switch % len(views)])
                app.refresh_views()
            await pilot.pause()
            slowest[kind] = max(slowest[kind], time.monotonic() - started)
        assert app.model.state.seq == total
    print(f"slowest frame {slowest['frame'] * 1000:.0f} ms, switch {slowest['switch'] * 1000:.0f} ms")


def test_the_command_column_shows_what_runs() -> None:
    conda = "/opt/conda/envs/agent/bin/python3.12"
    assert fmt.command_text([conda, "-u", "-X", "dev", "-m", "agent.run", "--n", "3"]) == "agent.run --n 3"
    assert fmt.command_text(["/usr/bin/python3", "bench/matmul.py", "--size", "4096"]) == "bench/matmul.py --size 4096"
    assert fmt.command_text(["/usr/bin/python3", "-c", "print(1)"]) == "python3 -c print(1)"
    assert fmt.command_text(["/usr/local/bin/nsys", "profile", "./a.out"]) == "nsys profile ./a.out"
    assert fmt.memory_short(60 << 30, 150_754_820_096) == "60/140G"
    assert fmt.memory_short(1 << 40, 3 << 39) == "1.0/1.5T"
    assert fmt.elapsed(12.3456) == "+12.346s" and fmt.elapsed(3722.5) == "+1h02m" and fmt.elapsed(61.5) == "+1m01.5s"


def test_a_stalled_feed_says_stale_with_its_age() -> None:
    from krex_console.feed import FeedStatus

    app = KrexConsole(control="ipc:///nonexistent/control.sock", telemetry="ipc:///nonexistent/telemetry.sock")
    assert app.live is not None
    app.status = FeedStatus.LIVE
    assert "● LIVE" in app.status_text()
    app.live.last_message_mono = time.monotonic() - 12.0  # the feed itself has not noticed yet
    text = app.status_text()
    assert "LIVE" not in text and "STALE 12.0s" in text


@run_async
async def test_filtered_commands_stay_one_row_each_while_they_churn() -> None:
    """The Commands view while the operator types a filter a key at a time
    (`state:` matches nothing on the way to `state:running`), scrolls to the
    bottom, re-sorts and clears it, with commands starting and ending between
    keys. What a terminal shows (only the regions the app repaints, applied in
    order: TerminalCopy) agrees with a full render, so no row is left behind
    where a moved or filtered-out row used to be; it shows each command once;
    and with the whole filter typed the rows are exactly the running commands,
    newest first."""
    app = synthetic_app(6_000, 4, at=1_000, checkpoint_every=100_000)
    feed = app.replay
    assert feed is not None
    at = 1_000

    async def churn_and_check(step: str) -> None:
        nonlocal at
        at += 173
        feed.seek_event(at)
        # The app takes the seek's clock from its message: only then is the state settled.
        await wait_for(pilot, lambda: app.model.now == feed.clock, what="the seek's state")
        await rendered(pilot)
        shown = await on_the_terminal(step)
        # Repainted from the table's data alone (its caches dropped), the
        # screen must not change: a line the sync changed without repainting
        # would still show the old row here.
        table.notify_style_update()
        assert await on_the_terminal(f"{step} (repainted)") == shown, step
        ids = [line.split()[0] for line in shown.splitlines() if line.split() and line.split()[0].startswith("b0")]
        assert len(ids) == len(set(ids)), (step, ids)

    async def on_the_terminal(step: str) -> str:
        await pilot.pause()
        full = "\n".join(line.rstrip() for line in screen_text(app).splitlines())
        await wait_for(pilot, lambda: terminal.text() == full, timeout_s=5.0,
                       what=f"the terminal to show the render after {step!r}:\n{terminal.text()}\n--- render:\n{full}")
        return full

    async with app.run_test(size=(120, 40)) as pilot:
        terminal = TerminalCopy(app)
        table = app.query_one(CommandsTable)
        await pilot.press("2", "end")
        await churn_and_check("end")
        for key in ["slash", *"state:running", "enter", "end", "G", "escape", "end"]:
            await pilot.press(key)
            await churn_and_check(key)
            if table.query_text == "state:running" and table.sort_column is None:
                expected = sorted((c for c in app.model.state.commands.values() if c.state == "running"),
                                  key=lambda c: (c.submitted_at, c.id), reverse=True)
                assert [r.key.value for r in table.ordered_rows] == [c.id for c in expected], at
        assert terminal.updates > 0 and table.query_text == ""


def _one_table_app() -> tuple[type, type]:
    """A two-column table (ID, Command) alone in an app: the table sync's own tests."""
    from typing import ClassVar

    from textual.app import App, ComposeResult

    from krex_console.views.columns import Column

    class Table(FittedTable):
        COLUMNS: ClassVar[list[Column]] = [Column("id", "ID", 0), Column("argv", "Command", 2, flex=True, least=10)]

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield Table()

    return Table, Host


def _rows(keys: list[str]) -> list:
    from krex_console.views.columns import Row

    return [Row(k, {"id": k, "argv": f"python3 bench.py {k}"}, {}) for k in keys]


@run_async
async def test_rows_arriving_above_keep_the_cursor_seen_and_a_scrolled_view_still() -> None:
    """New rows above the cursor: a cursor the operator could see stays on its
    row and in view; a view scrolled away from the cursor (the wheel moves the
    view, not the cursor) keeps showing the same rows instead of jumping back."""
    from krex_console.views.table_sync import row_visible

    Table, Host = _one_table_app()
    async with Host().run_test(size=(80, 24)) as pilot:
        table = pilot.app.query_one(Table)
        keys = [f"c{i:03d}" for i in range(100)]
        table.show(_rows(keys))
        await pilot.pause()
        table.move_cursor(row=5)
        keys = [f"n{i:03d}" for i in range(30)] + keys
        table.show(_rows(keys))
        await wait_for(pilot, lambda: row_visible(table, table.cursor_row), what="the cursor back in view")
        assert table.ordered_rows[table.cursor_row].key.value == "c005"
        table.scroll_to(y=80, animate=False)
        await pilot.pause()
        top = table.ordered_rows[80].key.value
        table.show(_rows([f"m{i:03d}" for i in range(10)] + keys))
        await pilot.pause()
        await pilot.pause()
        assert table.ordered_rows[table.cursor_row].key.value == "c005"
        assert table.ordered_rows[int(table.scroll_y)].key.value == top, table.scroll_y


@run_async
async def test_rows_sharing_a_key_are_refused_by_name_and_the_table_kept() -> None:
    """A view that hands the table two rows with one key gets an error that
    names the view and the key, before any row changed (Textual's own error,
    halfway through an update, names neither)."""
    from krex_console.views.table_sync import DuplicateRowKey

    Table, Host = _one_table_app()
    async with Host().run_test(size=(80, 24)) as pilot:
        table = pilot.app.query_one(Table)
        table.show(_rows(["a", "b"]))
        with pytest.raises(DuplicateRowKey, match="Table: two rows have the key 'c'"):
            table.show(_rows(["c", "a", "c"]))
        assert [r.key.value for r in table.ordered_rows] == ["a", "b"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from krex_console.main import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("krex-console ")
