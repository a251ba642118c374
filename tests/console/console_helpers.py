"""Helpers for the console tests: screen text, waiting on the app, workloads."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.app import App

from krex_console.app import KrexConsole
from krex_console.dialogs import ConfirmDialog
from krex_runtime.testing.local_runtime import Runtime

REPO = Path(__file__).resolve().parents[2]


def _load_console_frame() -> Any:
    """benchmarks/console_frame.py (benchmarks/ is no package): its synthetic
    trace of a busy node, which layout and replay tests play."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("console_frame", REPO / "benchmarks" / "console_frame.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


console_frame = _load_console_frame()

CANDIDATE = [sys.executable, "-m", "krex_runtime.demo.candidate", "--import-s", "0.1", "--compile-s", "0.05",
             "--kernel-us", "500", "--repeats", "10"]


def screen_text(app: App[Any]) -> str:
    """The screen as plain text, rendered the way App.export_screenshot does."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


class TerminalCopy:
    """What a terminal would show: every update the app writes (only the
    regions it repaints, as the real driver sends them) applied to a grid of
    cells. A headless app writes nothing, and screen_text renders afresh, so
    a region the app changed but never repainted (a row left behind where a
    moved row used to be) shows only here."""

    def __init__(self, app: App[Any]) -> None:
        from rich.cells import cell_len
        from rich.segment import ControlType
        from textual._compositor import CompositorUpdate

        self.app = app
        width, height = app.size
        self.grid = [[" "] * width for _ in range(height)]
        self.updates = 0
        x = y = 0

        def display(screen: Any, update: Any) -> None:
            nonlocal x, y
            if not isinstance(update, CompositorUpdate) or app._batch_count:
                return
            self.updates += 1
            for segment in update.__rich_console__(app.console, app.console.options):
                if segment.control:
                    for code in segment.control:
                        if code[0] == ControlType.CURSOR_MOVE_TO:
                            x, y = code[1], code[2]
                    continue
                for char in segment.text:
                    if char == "\n":
                        x, y = 0, y + 1
                        continue
                    if 0 <= y < len(self.grid) and 0 <= x < len(self.grid[y]):
                        self.grid[y][x] = char
                    x += cell_len(char)

        app._display = display  # type: ignore[method-assign]
        app.screen.refresh()  # everything once, as a terminal gets it at start-up

    def text(self) -> str:
        return "\n".join("".join(row).rstrip() for row in self.grid)


async def settled_screen(pilot: Any, attempts: int = 40) -> str:
    """The screen once two captures a moment apart agree: layout work that
    finishes a frame later (column widths, scrollbars) must not leak into a
    snapshot."""
    app = pilot.app
    text = screen_text(app)
    for _ in range(attempts):
        await pilot.pause(0.05)
        again = screen_text(app)
        if again == text:
            return text
        text = again
    return text


async def wait_for(pilot: Any, predicate: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def rendered(pilot: Any) -> None:
    """Let the app take the newest state and repaint."""
    app: KrexConsole = pilot.app
    app.refresh_views()
    await pilot.pause()


def live_app(rt: Runtime, read_only: bool = False) -> KrexConsole:
    control = f"ipc://{rt.run_dir / ('control-ro.sock' if read_only else 'control.sock')}"
    return KrexConsole(control=control, telemetry=f"ipc://{rt.run_dir / 'telemetry.sock'}", read_only=read_only)


def submit(rt: Runtime, argv: list[str], **body: Any) -> str:
    with rt.client() as client:
        return client.call("submit", {"argv": argv, **body})["id"]


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def run_async(test: Callable[..., Any]) -> Callable[..., Any]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""
    import functools

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(test(*args, **kwargs))

    return wrapper


def shown_actions(app: App[Any]) -> set[str]:
    """The actions the footer offers on the current screen (check_action applied)."""
    return {active.binding.action for active in app.screen.active_bindings.values()}


def check_snapshot(folder: Path, name: str, text: str) -> None:
    """`text` equals the committed FOLDER/NAME.txt (KREX_UPDATE_SNAPSHOTS=1 writes it instead)."""
    path = folder / f"{name}.txt"
    if os.environ.get("KREX_UPDATE_SNAPSHOTS"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path.name}: run with KREX_UPDATE_SNAPSHOTS=1 and review it"
    assert text == path.read_text(), f"{name} differs from {path} (KREX_UPDATE_SNAPSHOTS=1 to accept)"


async def confirm_dialog(pilot: Any) -> ConfirmDialog:
    dialog = await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog) and pilot.app.screen,
                            what="the confirm dialog")
    await pilot.pause()
    return dialog


async def answer(pilot: Any, confirm: bool) -> None:
    """Enter on the dialog as it opens (Cancel has the focus), or Tab to the action first."""
    if confirm:
        await pilot.press("tab")
    await pilot.press("enter")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, ConfirmDialog), what="the dialog to close")


async def cancelled_then_confirmed(pilot: Any, key: str, question: str, unchanged: Callable[[], bool]) -> None:
    """`key` opens the confirm dialog asking `question` with Cancel focused:
    Enter cancels it (`unchanged` still holds); the second time, Tab + Enter
    confirms."""
    await pilot.press(key)
    dialog = await confirm_dialog(pilot)
    assert question in screen_text(pilot.app)
    assert dialog.focused is dialog.query_one("#cancel")
    await answer(pilot, confirm=False)
    await pilot.pause(0.3)
    assert unchanged()
    await pilot.press(key)
    await confirm_dialog(pilot)
    await answer(pilot, confirm=True)
