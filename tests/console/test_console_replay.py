"""Replay: a committed trace through the same views, with play, pause, step,
speed and seek; and text snapshots of the main views at two terminal sizes.

Snapshots are plain text (tests/console/snapshots/*.txt) so a change shows as
a readable diff; regenerate them with KREX_UPDATE_SNAPSHOTS=1. (Not
pytest-textual-snapshot: its current release pins syrupy 4.8, which needs
pytest < 9, and this suite runs on pytest 9.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from console_helpers import check_snapshot, console_frame, rendered, run_async, settled_screen, shown_actions, wait_for

from krex_console.app import KrexConsole
from krex_console.dialogs import ConfirmDialog
from krex_console.feed import ReplayFeed
from krex_console.main import build_parser, endpoints_for, make_app
from krex_console.model import gpu_figures
from krex_console.views.gpu_detail import GpuDetailScreen
from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.trace.jsonl import TraceWriter, read_trace, replay

TRACE = Path(__file__).parent / "data" / "small-trace.jsonl"


def _load_console_screens() -> Any:
    """scripts/console_screens.py (scripts/ is no package): what renders docs/console.md's screens."""
    import importlib.util

    path = Path(__file__).parents[2] / "scripts" / "console_screens.py"
    spec = importlib.util.spec_from_file_location("console_screens", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


console_screens = _load_console_screens()
SNAPSHOTS = Path(__file__).parent / "snapshots"
LEASE_HELD_AT = 0.9  # seconds into the fixture: GPU 1 leased by the operator, commands running


def replay_app(at: float | None = None, checkpoint_every: int = 500) -> KrexConsole:
    feed = ReplayFeed(read_trace(TRACE), checkpoint_every=checkpoint_every)
    feed.paused = True
    if at is not None:
        feed.seek_offset(at)
    return KrexConsole(replay=feed)


def comparable(state: node_state.NodeState) -> dict:
    return node_state.to_snapshot(state)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
@run_async
async def test_snapshots_of_the_main_views(size: tuple[int, int]) -> None:
    app = replay_app(at=LEASE_HELD_AT)
    tag = f"{size[0]}x{size[1]}"
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0, what="the replayed state")
        await rendered(pilot)
        await pilot.press("down")  # GPU 1: the leased one
        await rendered(pilot)
        check_snapshot(SNAPSHOTS, f"overview-{tag}", await settled_screen(pilot))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), what="the GPU detail")
        await rendered(pilot)
        check_snapshot(SNAPSHOTS, f"gpu-detail-{tag}", await settled_screen(pilot))
        await pilot.press("escape", "2")
        await rendered(pilot)
        check_snapshot(SNAPSHOTS, f"commands-{tag}", await settled_screen(pilot))
        await pilot.press("3")
        await rendered(pilot)
        check_snapshot(SNAPSHOTS, f"events-{tag}", await settled_screen(pilot))


def test_the_80x24_screens_in_the_docs_are_the_consoles() -> None:
    """docs/console.md shows the demo's trace at 80x24 as the console renders
    it now (scripts/console_screens.py render --write rewrites them)."""
    screens = console_screens.render()
    assert [caption for caption, _ in screens] and len(screens) == 5
    doc = (Path(__file__).parents[2] / "docs" / "console.md").read_text()
    assert console_screens.markdown(screens) in doc, \
        "docs/console.md's 80x24 screens are stale: scripts/console_screens.py render --write"


@run_async
async def test_replay_shows_the_state_at_the_seek_time() -> None:
    trace = read_trace(TRACE)
    app = replay_app(at=LEASE_HELD_AT)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0)
        assert app.replay is not None
        expected = replay(trace, until=app.replay.start + LEASE_HELD_AT)
        assert comparable(app.model.state) == comparable(expected)
        gpu1 = app.model.state.gpus[1]
        figures = gpu_figures(app.model.state, gpu1, app.model.now)
        assert figures["holder"] == "operator lease" and figures["lease"] == "operator"
        assert figures["hold"] != "-" and figures["util"] == "n/a" and figures["inflation_p50"] == "n/a"


@run_async
async def test_pause_step_speed_seek_keys() -> None:
    trace = read_trace(TRACE)
    app = replay_app(checkpoint_every=5)
    feed = app.replay
    assert feed is not None
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        assert feed.index == 0 and feed.paused
        await pilot.press("n", "n", "n")
        assert feed.index == 3 and app.model.state.seq == 3 and feed.paused
        await pilot.press("plus", "plus")
        assert feed.speed == 4
        await pilot.press("minus")
        assert feed.speed == 2
        # Seek forward past several checkpoints, then back: both equal a fresh replay.
        await pilot.press("g")
        await pilot.press(*"1.0", "enter")
        await wait_for(pilot, lambda: feed.clock == pytest.approx(feed.start + 1.0))
        assert comparable(feed.state) == comparable(replay(trace, until=feed.start + 1.0))
        assert len(feed.checkpoints) > 1
        await pilot.press("left_square_bracket")  # back 10 s: to the start
        assert feed.index == 0 and feed.state.seq == 0
        feed.seek_offset(0.7)
        assert comparable(feed.state) == comparable(replay(trace, until=feed.start + 0.7))
        # Play to the end at top speed.
        feed.set_speed(64)
        await pilot.press("space")  # (at this speed it may reach the end within one tick)
        await wait_for(pilot, lambda: feed.index == len(trace.events), what="the end of the trace")
        await wait_for(pilot, lambda: feed.paused, what="the player to stop at the end")
        assert comparable(app.model.state) == comparable(replay(trace))


@run_async
async def test_actions_are_hidden_in_replay() -> None:
    app = replay_app(at=LEASE_HELD_AT)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0)
        await rendered(pilot)
        shown = shown_actions(app)
        assert "seek" in shown and "toggle_play" in shown
        assert not shown & {"lease", "release", "recycle", "toggle_admission"}
        for key in ("l", "u", "c", "p"):
            await pilot.press(key)
            assert not isinstance(app.screen, ConfirmDialog)
        await pilot.press("2")
        await pilot.press("k")
        assert not isinstance(app.screen, ConfirmDialog)
        assert not app.actions_allowed


def test_replay_command_line_starts_at_a_time() -> None:
    app = make_app(build_parser().parse_args(["--replay", str(TRACE), "--at", "0.9", "--paused"]))
    assert app.replay is not None and app.replay.paused
    assert app.replay.clock == pytest.approx(app.replay.start + 0.9)


def test_command_line_finds_the_runtime_like_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KREX_ENDPOINT", raising=False)
    monkeypatch.setenv("KREX_RUN_DIR", str(tmp_path))
    assert endpoints_for(build_parser().parse_args([])) == (
        f"ipc://{tmp_path}/control.sock", f"ipc://{tmp_path}/telemetry.sock")
    assert endpoints_for(build_parser().parse_args(["--read-only"])) == (
        f"ipc://{tmp_path}/control-ro.sock", f"ipc://{tmp_path}/telemetry.sock")
    monkeypatch.setenv("KREX_ENDPOINT", "ipc:///elsewhere/control.sock")
    assert endpoints_for(build_parser().parse_args([]))[1] == "ipc:///elsewhere/telemetry.sock"
    app = make_app(build_parser().parse_args(["--connect", "ipc:///x/control.sock", "--read-only"]))
    assert app.read_only and app.control_endpoint == "ipc:///x/control-ro.sock" and not app.actions_allowed


def two_runs_trace(path: Path) -> list[dict]:
    """A trace as a restarted runtime leaves it (the first run's file moved
    aside to trace.jsonl.1 by the second run's writer): each run numbers its
    events from 1, and each has a gap record, which has no seq of its own.
    Returns the events a replay reads, in order."""
    header, first = console_frame.synthetic_events(300, 2)
    _, second = console_frame.synthetic_events(200, 2)
    shift = first[-1]["t"] + 1.0 - second[0]["t"]
    # The second run's commands are its own (another nonce in their ids).
    second = [e | {"t": e["t"] + shift} | ({"id": f"r2-{e['id']}"} if "id" in e else {}) for e in second]
    written = []
    for run, gap_at in ((first, 150), (second, 120)):
        lost = run[gap_at : gap_at + 3]  # the writer could not write these: a gap record says so
        gap = {"type": "trace_gap", "t": lost[-1]["t"], "lost": 3, "first_seq": lost[0]["seq"], "last_seq": lost[-1]["seq"]}
        events = [*run[:gap_at], gap, *run[gap_at + 3 :]]
        writer = TraceWriter(path, {k: v for k, v in header.items() if k not in ("format", "version")})
        for event in events:
            writer.write(event)
        writer.close()
        written += events
    return written


@run_async
async def test_events_of_a_restarted_runtime_show_once_each(tmp_path: Path) -> None:
    """Replaying the history of a runtime that restarted: the two runs' events
    share seq numbers, and gap records have none; the Events view shows each
    event once, in the trace's order, from the first run's into the second's."""
    from krex_console.views.events import MAX_ROWS, EventsTable

    path = tmp_path / "trace.jsonl"
    events = two_runs_trace(path)
    assert (tmp_path / "trace.jsonl.1").exists()
    trace = read_trace(path)
    assert len(trace.events) == len(events) > MAX_ROWS
    feed = ReplayFeed(trace)
    feed.paused = True
    feed.seek_event(len(events))  # both runs in the view
    app = KrexConsole(replay=feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await rendered(pilot)
        table = app.query_one(EventsTable)

        def seqs() -> list[str]:
            return [str(table.get_row(row.key)[0]) for row in table.ordered_rows]

        def expected(upto: int) -> list[str]:
            return [str(e.get("seq", "-")) for e in events[:upto]][-MAX_ROWS:]

        assert seqs() == expected(len(events))
        # Played on from the first run into the second (which starts at seq 1 again), the view keeps up.
        for upto in (250, 320, len(events)):
            feed.seek_event(upto)
            await wait_for(pilot, lambda: app.model.now == feed.clock, what="the seek's state")
            await rendered(pilot)
            assert seqs() == expected(upto), upto


@run_async
async def test_each_event_of_a_restarted_runtime_is_timed_from_its_own_runs_start(tmp_path: Path) -> None:
    """The Events view's time is since the runtime started: for the first
    run's events of a trace that holds two runs, since the first run's start,
    not the second's (which would show each of them as +0.000s)."""
    from krex_console import format as fmt
    from krex_console.views.events import MAX_ROWS, EventsTable

    path = tmp_path / "trace.jsonl"
    events = two_runs_trace(path)
    times, start = [], None
    for event in events:
        start = event["t"] if event["type"] == "runtime_started" else start
        times.append(fmt.elapsed(event["t"] - start))
    feed = ReplayFeed(read_trace(path))
    feed.paused = True
    feed.seek_event(len(events))
    app = KrexConsole(replay=feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await rendered(pilot)
        table = app.query_one(EventsTable)
        # From near the end of the first run into the second, from a seek back
        # (the log refilled from a checkpoint) and one forward.
        for upto in (len(events), 320, 250, 320):
            feed.seek_event(upto)
            await wait_for(pilot, lambda: app.model.now == feed.clock, what="the seek's state")
            await rendered(pilot)
            shown = [str(table.get_row(row.key)[1]) for row in table.ordered_rows]
            assert shown == times[:upto][-MAX_ROWS:], upto
            assert len(set(shown)) > 1
