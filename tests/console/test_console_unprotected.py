"""The Commands view shows a command's unprotected timings in its exit cell."""

from __future__ import annotations

from krex_console.views.commands import command_row
from krex_runtime.wire.model import CommandInfo


def test_unprotected_timings_show_in_the_exit_cell() -> None:
    cmd = CommandInfo(id="a-1", argv=["python", "bench.py"], state="finished", exit_code=0, unprotected_timings=3)
    assert command_row(cmd, 0.0)[6] == "0 unprot 3"
    cmd.unprotected_timings = 0
    assert command_row(cmd, 0.0)[6] == "0"
