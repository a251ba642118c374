"""Trust figures in the console: a command's unprotected timings in its exit
cell (Commands view), a GPU's verified regions (GPU detail)."""

from __future__ import annotations

from krex_console.views.commands import command_row
from krex_runtime.wire.model import CommandInfo


def test_unprotected_timings_show_in_the_exit_cell() -> None:
    cmd = CommandInfo(id="a-1", argv=["python", "bench.py"], state="finished", exit_code=0, unprotected_timings=3)
    assert command_row(cmd, 0.0)[6] == "0 unprot 3"
    cmd.unprotected_timings = 0
    assert command_row(cmd, 0.0)[6] == "0"


def test_the_gpu_detail_counts_verified_regions() -> None:
    from krex_console.views.gpu_detail import verdict_text
    from krex_runtime.wire.model import GpuState

    gpu = GpuState(index=0, uuid="GPU-0", name="sim", memory_total=1, simulated=True, slots=1)
    assert verdict_text(gpu) == ""
    gpu.verdicts, gpu.last_region = {"verified": 3, "violated": 1}, {"verdict": "violated"}
    assert verdict_text(gpu) == "  verified 3/4 (last violated)"
