"""Trust figures in the console: a command's unprotected timings in its exit
cell (Commands view); a GPU's verified regions, foreign processes' pids and
each share key's part of its region time (GPU detail)."""

from __future__ import annotations

from krex_console.views.command_list import command_row
from krex_runtime.wire.state.model import CommandInfo


def test_unprotected_timings_show_in_the_exit_cell() -> None:
    cmd = CommandInfo(id="a-1", argv=["python", "bench.py"], state="finished", exit_code=0, unprotected_timings=3)
    assert command_row(cmd, 0.0).cells["exit"] == "0 unprot 3"
    cmd.unprotected_timings = 0
    assert command_row(cmd, 0.0).cells["exit"] == "0"


def test_the_gpu_detail_counts_verified_regions() -> None:
    from krex_console.views.gpu_detail import verdict_text
    from krex_runtime.wire.state.model import GpuState

    gpu = GpuState(index=0, uuid="GPU-0", name="sim", memory_total=1, simulated=True, slots=1)
    assert verdict_text(gpu) == ""
    gpu.verdicts, gpu.last_region = {"verified": 3, "violated": 1}, {"verdict": "violated"}
    assert verdict_text(gpu) == "  verified 3/4 (last violated)"
    from krex_console.views.gpu_detail import foreign_text

    assert foreign_text({"foreign": [42]}) == "  [b]foreign pids 42[/b]" and foreign_text({"foreign": None}) == ""


def test_the_gpu_detail_shows_each_share_keys_region_time() -> None:
    from krex_console.views.gpu_detail import share_text
    from krex_runtime.wire.state.model import GpuState

    gpu = GpuState(index=0, uuid="GPU-0", name="sim", memory_total=1, simulated=True, slots=1)
    assert share_text(gpu) == ""
    gpu.share_region_s = {"few": 1.0, "many": 3.0}
    assert share_text(gpu) == "  region time few 25%  many 75%"
