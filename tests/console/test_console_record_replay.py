"""A trace recorded from a demo-like run, replayed, shows the same per-GPU
figures at the same trace time as the live console showed."""

from __future__ import annotations

import re
import sys
from typing import Any

from console_helpers import live_app, rendered, run_async, submit, wait_for

from krex_console.app import KrexConsole
from krex_console.feed import FeedStatus, ReplayFeed
from krex_console.views.overview import OverviewTable
from krex_runtime.testing.local_runtime import Runtime
from krex_runtime.wire.trace.jsonl import read_trace

WORKLOAD = [sys.executable, "-m", "krex_runtime.demo.candidate", "--import-s", "0.2", "--compile-s", "0.05",
            "--repeats", "60", "--kernel-us", "5000"]


SPARKLINE = re.compile(r"\s*[▁▂▃▄▅▆▇█]+$")


def overview_rows(app: KrexConsole) -> dict[str, list[str]]:
    """The overview's figures as shown, cell by cell, keyed by GPU UUID. A
    sparkline is the history this console happened to watch (a replay that
    seeks has seen less of it), so the comparison takes the figure beside it."""
    app.refresh_views()
    table = app.query_one(OverviewTable)
    return {key.value: [SPARKLINE.sub("", str(cell)) for cell in table.get_row(key)] for key in table.rows}


def interesting(app: KrexConsole) -> bool:
    gpus = app.model.state.gpus.values()
    return any(g.region_holder is not None for g in gpus) and any(g.running for g in gpus)


def idle(app: KrexConsole) -> bool:
    return not any(c.state in ("queued", "running") for c in app.model.state.commands.values())


@run_async
async def _record_and_replay(rt: Runtime) -> None:
    live = live_app(rt)
    captured: list[tuple[int, float, dict[str, list[str]]]] = []
    async with live.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: live.status == FeedStatus.LIVE and live.model.state.gpus)
        submitted = 0
        while len(captured) < 3:
            if idle(live):
                # Another batch when the last ended before the console saw three
                # such moments (a busy host can stretch a candidate's start-up
                # past its neighbours' regions).
                for _ in range(6):
                    submit(rt, WORKLOAD, label=f"cand-{submitted}")
                    submitted += 1
                await wait_for(pilot, lambda submitted=submitted: len(live.model.state.commands) >= submitted, 60, "the batch")
            await wait_for(pilot, lambda: interesting(live) or idle(live), 60, "a region held while others run")
            if not interesting(live):
                continue
            # Within one synchronous stretch the feed cannot move the state, and
            # the views age things by the state's own time, as replay does.
            live.model.now = live.model.state.time
            captured.append((live.model.state.seq, live.model.state.time, overview_rows(live)))
            await pilot.pause(0.15)
        await wait_for(pilot, lambda: live.model.state.totals.get("finished", 0) == submitted, 90, "the workload")

    feed = ReplayFeed(read_trace(rt.trace_path), checkpoint_every=16)
    feed.paused = True
    replayed = KrexConsole(replay=feed)
    async with replayed.run_test(size=(160, 40)) as pilot:
        await rendered(pilot)
        for seq, t, rows in reversed(captured):  # backwards: seeks restore checkpoints
            feed.seek(t)
            await pilot.pause()
            assert replayed.model.state.seq == seq
            assert overview_rows(replayed) == rows
    assert any(any(cells[1] != "-" for cells in rows.values()) for _, _, rows in captured)


def test_replay_shows_what_the_live_console_showed(make_runtime: Any) -> None:
    _record_and_replay(make_runtime(policy="krex", slots=3))
