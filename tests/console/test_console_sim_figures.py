"""The console at 80x24 on a contended simulated GPU: the overview's row and
panel show its inflation estimate, utilisation, memory and SM clock as the
runtime measured them (a GPU that heats: gpus.simulated_heat), and region
verdicts show in the Events rows and the region timeline, each in its
colour, `perturbed` included.

Presence and sign only: the figures' sizes depend on the machine."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

from console_helpers import live_app, rendered, run_async, screen_text, settled_screen, wait_for
from runtime_helpers import busy, finish, submit, wait_ready
from textual.widgets import DataTable

from krex_console.app import KrexConsole
from krex_console.feed import FeedStatus, ReplayFeed
from krex_console.views.events import EventsTable
from krex_console.views.gpu_detail import GpuDetailScreen
from krex_runtime.sim import layout as sim_layout
from krex_runtime.testing.local_runtime import Runtime
from krex_runtime.wire.trace.jsonl import read_trace

PY = sys.executable
SIZE = (80, 24)
TRACE = Path(__file__).parent / "data" / "small-trace.jsonl"
CANDIDATE = [PY, "-m", "krex_runtime.demo.candidate", "--import-s", "0.1", "--compile-s", "0.05",
             "--kernel-us", "2000", "--check-kernels", "20", "--repeats", "20", "--mem-gb", "0.5"]
HOLDER = ("import time\nfrom krex_runtime.sim.simcuda import SimCuda\nSimCuda().alloc(2 << 30)\n"
          "print('ready', flush=True)\ntime.sleep(600)")


def _candidates(rt: Runtime, stop: threading.Event) -> None:
    """Regions on the warm GPU, one after another, until told to stop."""
    while not stop.is_set():
        rt.krex("run", "--", *CANDIDATE)


@run_async
async def _overview_of_a_warm_gpu(rt: Runtime) -> None:
    app = live_app(rt)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE, what="the live feed")

        def warm() -> bool:
            gpu = app.model.state.gpus[0]
            t = gpu.telemetry or {}
            return bool((gpu.estimate.get("inside_p50") or 0) > 0 and t.get("util_pct") and t.get("mem_used")
                        and t["sm_clock_mhz"] < sim_layout.TOP_SM_CLOCK_MHZ)

        await wait_for(pilot, warm, 300, "a warm, busy GPU with a non-zero estimate")
        await rendered(pilot)
        text = screen_text(app)
        row = next(line for line in text.splitlines() if line.startswith(" 0 "))
        p50, p95 = re.search(r"\+(\d+\.?\d*)%/\+(\d+\.?\d*)%", row).groups()  # type: ignore[union-attr]
        assert float(p50) > 0 and float(p95) > 0, row  # the estimate, not +0.0%
        util = re.search(r"util (\d+)%", text)
        memory = re.search(r"memory (\d+\.\d)GiB/80\.0GiB", text)
        clock = re.search(r"SM (\d+)MHz", text)
        assert util and memory and clock, text
        assert int(util.group(1)) > 0 and float(memory.group(1)) > 0, text
        assert int(clock.group(1)) < sim_layout.TOP_SM_CLOCK_MHZ, text

        # The Events rows name each released region's certificate.
        await pilot.press("3")
        await rendered(pilot)
        assert re.search(r"region_released\s+0\s+region \d+ t\d+ (verified|perturbed)", screen_text(app)), screen_text(app)


def test_the_overview_at_80x24_shows_what_contention_costs_a_warm_gpu(make_runtime) -> None:
    rt = make_runtime(policy="krex", sim=1, slots=8, gpus_extra="simulated_heat = true")
    others = [busy(rt, gpu=0, kernel_us=2000, depth=4) for _ in range(3)]
    holder = submit(rt, PY, "-c", HOLDER)
    wait_ready(rt, holder, *others)
    stop = threading.Event()
    regions = threading.Thread(target=_candidates, args=(rt, stop))
    regions.start()
    try:
        _overview_of_a_warm_gpu(rt)
    finally:
        stop.set()
        regions.join()
        finish(rt, holder, *others)


def _with_verdicts(tmp_path: Path) -> tuple[Path, int]:
    """The fixture trace with a verdict on every released region: `perturbed` on
    the first, `verified` on the others. Returns the trace and the perturbed region."""
    lines, perturbed = [], None
    for line in TRACE.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "region_released":
            if perturbed is None and event["kind"] == "region":
                perturbed = event["region"]
                event |= {"verdict": "perturbed", "verdict_reasons": ["gate: closed", "cpu: waited 40% of the hold"]}
            else:
                event |= {"verdict": "verified", "verdict_reasons": ["gate: closed"]}
        lines.append(json.dumps(event))
    path = tmp_path / "verdicts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert perturbed is not None
    return path, perturbed


@run_async
async def _verdicts_replayed(trace: Path, perturbed: int) -> None:
    feed = ReplayFeed(read_trace(trace))
    feed.paused = True
    feed.seek_offset(read_trace(trace).events[-1]["t"] - feed.start)
    app = KrexConsole(replay=feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0, what="the replayed state")
        await pilot.press("3")
        await rendered(pilot)
        table = app.query_one(EventsTable)
        await wait_for(pilot, lambda: table.row_count, what="the events")
        subjects = [table.get_cell(key, "subject") for key in table.rows]
        ours = [s for s in subjects if s.plain == f"region {perturbed} t{_tenant(trace, perturbed)} perturbed"]
        assert ours, [s.plain for s in subjects]
        spans = [(ours[0].plain[span.start:span.end], str(span.style)) for span in ours[0].spans]
        assert ("perturbed", "magenta") in spans, spans
        verified = next(s for s in subjects if s.plain.endswith(" verified"))
        assert ("verified", "green") in [(verified.plain[x.start:x.end], str(x.style)) for x in verified.spans]
        await pilot.press("slash", *"perturbed", "enter")  # the filter: only its row is left
        await wait_for(pilot, lambda: table.row_count == 1, what="the filtered events")
        await rendered(pilot)
        assert re.search(rf"region_released\s+\d\s+region {perturbed} t\d+ perturbed", await settled_screen(pilot)), \
            screen_text(app)
        await pilot.press("escape")

        # The region timeline of its GPU says the same.
        gpu = next(e["gpu"] for e in read_trace(trace).events if e.get("region") == perturbed)
        await pilot.press("1")
        await rendered(pilot)
        for _ in range(gpu):
            await pilot.press("down")
        await pilot.press("enter")
        detail = await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen) and app.screen,
                                what="the GPU detail")
        await rendered(pilot)
        timeline = detail.query_one("#regions", DataTable)
        await wait_for(pilot, lambda: timeline.row_count, what="the region timeline")
        cell = timeline.get_cell(str(perturbed), "verdict")  # its row may be below the 80x24 fold
        assert (cell.plain, str(cell.style)) == ("perturbed", "magenta")


def _tenant(trace: Path, region: int) -> int:
    return next(e["tenant_id"] for e in read_trace(trace).events if e.get("region") == region)


def test_events_rows_and_the_timeline_show_a_perturbed_verdict_in_its_colour(tmp_path: Path) -> None:
    _verdicts_replayed(*_with_verdicts(tmp_path))
