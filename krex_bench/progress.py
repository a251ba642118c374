"""What `krex bench run` shows while it waits on a setup's commands: a bar with
the commands done, the time spent and the time left (rich.progress's
estimate from the rate so far), and each setup's line printed above it.

On a terminal the bar is drawn live and removed when the setup ends; into a
pipe or a file only the lines are written, as before, so logs stay plain.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class SetupProgress:
    """runner.Meter drawn with rich; use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("commands"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> SetupProgress:
        self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.stop()

    def begin(self, label: str, total: int) -> None:
        self.end()
        self._task = self._bar.add_task(label, total=total)

    def advance(self) -> None:
        if self._task is not None:
            self._bar.advance(self._task)

    def end(self) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None

    def line(self, text: str) -> None:
        """A line above the bar (plain text: no markup, no highlighting, no wrapping)."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)
