"""GPU memory per process in the console's GPU detail, as nvitop lists it:
the simulator's per-process allocations (NVML's running processes on a real
GPU) through the runtime's telemetry, each named by its command."""

from __future__ import annotations

import sys
from typing import Any

from console_helpers import live_app, rendered, run_async, screen_text, submit, wait_for

from krex_console.feed import FeedStatus
from krex_console.views.gpu_detail import GpuDetailScreen
from krex_runtime.testing.local_runtime import Runtime

HOLDER = [sys.executable, "-c",
          "from krex_runtime.sim.simcuda import SimCuda; import time; cuda = SimCuda(0); cuda.alloc(256 << 20); "
          "print('held', flush=True); time.sleep(60)"]


def _memory_of(app: Any, pid: int) -> Any:
    telemetry = app.model.state.gpus[0].telemetry or {}
    return next((e for e in telemetry.get("process_memory") or [] if e.get("pid") == pid), None)


@run_async
async def _detail_shows_memory_per_process(rt: Runtime) -> None:
    app = live_app(rt)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE, what="the live feed")
        holder = submit(rt, HOLDER, label="holder", gpu=0)
        pid = await wait_for(pilot, lambda: (app.model.state.commands.get(holder) or None) and
                             app.model.state.commands[holder].pid, 30, "the holder's pid")
        entry = await wait_for(pilot, lambda: _memory_of(app, pid), 30, "its memory in telemetry")
        assert entry == {"pid": pid, "mem_used": 256 << 20, "foreign": False}
        await pilot.press("enter")  # the first GPU
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), what="the GPU detail")
        await rendered(pilot)
        text = screen_text(app)
        assert f"GPU memory by process: pid {pid} {holder} holder 256.0MiB" in text, text
        await pilot.press("escape")
        with rt.client() as client:
            client.call("cancel", {"id": holder})


def test_gpu_detail_shows_gpu_memory_per_process(make_runtime: Any) -> None:
    _detail_shows_memory_per_process(make_runtime(policy="krex", slots=2))
