"""The console's screens at 80x24, as docs/console.md shows them.

    .venv/bin/python scripts/console_screens.py record   # the demo, into tests/console/data/demo-trace.jsonl
    .venv/bin/python scripts/console_screens.py render   # its screens, printed
    .venv/bin/python scripts/console_screens.py render --write   # ... and put into docs/console.md

`record` runs what scripts/demo.sh runs (configs/simulated.toml: four
simulated GPUs that heat under their load, a canary each, the demo's
workload of candidates) for RECORD_S seconds without the console, keeps the
trace up to then, and rewrites what differs per machine and per run (times,
pids, paths, the node's and the device's names) so the committed file is
stable. Its figures are this machine's and the simulator's.

`render` replays that trace to AT_S seconds through the console's own app
(Textual's pilot, 80x24) and captures each view as text: the overview with
GPU 0's panel, GPU 0's detail, the commands, a finished command's detail
and the events. `--write` replaces the screens between the markers in
docs/console.md; tests/console/test_console_replay.py checks the two agree.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests" / "console" / "data" / "demo-trace.jsonl"
DOC = REPO / "docs" / "console.md"
BEGIN = "<!-- screens: scripts/console_screens.py render --write -->"
END = "<!-- screens: end -->"
SIZE = (80, 24)
RECORD_S = 15.0  # long enough for the GPUs to warm and the canaries to sample
AT_S = 13.5  # the moment the screens show
EPOCH = 1_800_000_000.0  # the recorded run starts here, whenever it ran
FIRST_PID = 10_000  # the recorded processes' pids, renumbered in order of appearance


# --- record ------------------------------------------------------------------------


def record(seconds: float) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, raw = Path(tmp) / "run", Path(tmp) / "trace.jsonl"
        env = {**os.environ, "KREX_RUN_DIR": str(run_dir)}
        env.pop("KREX_ENDPOINT", None)
        bin_dir = Path(sys.executable).parent
        runtime = subprocess.Popen(
            [str(bin_dir / "krex-runtime"), "--config", str(REPO / "configs" / "simulated.toml"),
             "--run-dir", str(run_dir), "--trace", str(raw)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not (run_dir / "control.sock").exists():
                if runtime.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("record: the runtime did not start")
                time.sleep(0.1)
            workload = subprocess.Popen([sys.executable, "-m", "krex_runtime.demo.workload", "--inflight", "12"],
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(seconds)
            workload.terminate()
            workload.wait(30)
        finally:
            runtime.send_signal(signal.SIGTERM)
            runtime.wait(60)
        return sanitize(raw.read_text().splitlines(), seconds, {str(run_dir): "/run/krex"})


def sanitize(lines: list[str], seconds: float, paths: dict[str, str]) -> list[str]:
    """The trace's first `seconds`, with what differs per machine and per run made stable."""
    header = json.loads(lines[0])
    shift = EPOCH - header["started_at"]
    device = re.sub(r"-\d+$", "", header["gpus"][0]["uuid"])
    pids: dict[int, int] = {}

    def pid(real: int) -> int:
        return pids.setdefault(real, FIRST_PID + len(pids))

    out = []
    for n, line in enumerate(lines):
        event = json.loads(line)
        if n and event.get("t", 0) > header["started_at"] + seconds:
            break
        for key in ("started_at", "t"):
            if key in event:
                event[key] = round(event[key] + shift, 6)
        if "node" in event:
            event["node"] = "node-01"
        if n == 0 or event.get("type") == "runtime_started":
            event["pid"] = 4242
            event.pop("cgroups", None)
        elif "pid" in event:
            event["pid"] = pid(event["pid"])
        if isinstance(event.get("drain"), dict):
            event["drain"] = {str(pid(int(k))): v for k, v in event["drain"].items()}
        for sample in (event.get("gpus") or {}).values() if event.get("type") == "telemetry" else ():
            sample["time"] = round(sample["time"] + shift, 6)
            for entry in sample.get("process_memory") or []:
                entry["pid"] = pid(entry["pid"])
        if "argv" in event:
            event["argv"] = ["python" if a == sys.executable else a for a in event["argv"]]
        text = json.dumps(event, separators=(",", ":")).replace(device, "GPU-SIM-demo")
        for real, stable in paths.items():
            text = text.replace(real, stable)
        out.append(text.replace(str(REPO), "/srv/krex"))
    return out


# --- render ------------------------------------------------------------------------


def screen_text(app: Any) -> str:
    """The screen as plain text, rendered the way App.export_screenshot does."""
    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


async def _settled(pilot: Any) -> str:
    """The screen once two captures a moment apart agree (column widths settle a frame late)."""
    pilot.app.refresh_views()
    await pilot.pause()
    text = screen_text(pilot.app)
    for _ in range(40):
        await pilot.pause(0.05)
        again = screen_text(pilot.app)
        if again == text:
            return text
        text = again
    return text


async def _until(pilot: Any, predicate: Any, what: str) -> Any:
    for _ in range(400):
        value = predicate()
        if value:
            return value
        await pilot.pause(0.05)
    raise SystemExit(f"render: no {what}")


async def _screens(trace: Path, at: float) -> list[tuple[str, str]]:
    from krex_console.app import KrexConsole
    from krex_console.feed import ReplayFeed
    from krex_console.views.command_list import CommandDetailScreen, CommandsTable
    from krex_console.views.gpu_detail import GpuDetailScreen
    from krex_console.views.table_sync import select_key
    from krex_runtime.wire.trace.jsonl import read_trace

    feed = ReplayFeed(read_trace(trace))
    feed.paused = True
    feed.seek_offset(at)
    app = KrexConsole(replay=feed)
    screens = []
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: app.model.state.seq > 0, "replayed state")
        screens.append(("The overview, GPU 0's panel under it", await _settled(pilot)))
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "GPU detail")
        screens.append(("GPU 0's detail: its figures, tenants and recent regions with their verdicts",
                        await _settled(pilot)))
        await pilot.press("escape", "2")
        screens.append(("The commands", await _settled(pilot)))
        done = max((c for c in app.model.state.commands.values() if c.state == "finished" and c.region_count),
                   key=lambda c: c.finished_at or 0.0)
        table = app.query_one(CommandsTable)
        await _until(pilot, lambda: select_key(table, done.id), f"row of {done.id}")
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, CommandDetailScreen), "command detail")
        screens.append((f"A finished command's detail ({done.id}): its region statistics and verdicts",
                        await _settled(pilot)))
        await pilot.press("escape", "3")
        screens.append(("The events, newest at the bottom: a released region's verdict in its subject",
                        await _settled(pilot)))
    return screens


def render(trace: Path = TRACE, at: float = AT_S) -> list[tuple[str, str]]:
    """(caption, screen) for each view, the screens as plain text."""
    return asyncio.run(_screens(trace, at))


def markdown(screens: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"{caption}:\n\n```\n{screen.rstrip(chr(10))}\n```" for caption, screen in screens)


def write_doc(screens: list[tuple[str, str]], doc: Path = DOC) -> None:
    text = doc.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:start] + "\n\n" + markdown(screens) + "\n\n" + text[end:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record", help=f"record the demo into {TRACE.relative_to(REPO)}")
    rec.add_argument("--seconds", type=float, default=RECORD_S)
    ren = sub.add_parser("render", help="print the screens (--write: into docs/console.md)")
    ren.add_argument("--at", type=float, default=AT_S)
    ren.add_argument("--write", action="store_true")
    args = p.parse_args()
    if args.what == "record":
        lines = record(args.seconds)
        TRACE.write_text("\n".join(lines) + "\n")
        print(f"record: {TRACE.relative_to(REPO)}, {len(lines) - 1} events")
        return
    screens = render(TRACE, args.at)
    if args.write:
        write_doc(screens)
        print(f"render: {len(screens)} screens into {DOC.relative_to(REPO)}")
    else:
        print(markdown(screens))


if __name__ == "__main__":
    main()
