"""Per-GPU fields the runtime does not send yet render as "n/a", and appear
by themselves once the state carries them (telemetry, canary, parked,
draining, pool); a malformed value is missing data too, never a crash."""

from __future__ import annotations

from pathlib import Path

from krex_console.model import ConsoleModel, MetricHistory, gpu_figures
from krex_console.views.gpu_detail import summarize_gpu
from krex_console.views.overview import gpu_row
from krex_runtime.wire.trace.jsonl import read_trace, replay

TRACE = Path(__file__).parent / "data" / "small-trace.jsonl"


def test_new_gpu_fields_appear_once_present() -> None:
    state = replay(read_trace(TRACE))
    gpu = state.gpus[0]
    before = gpu_figures(state, gpu, state.time)
    assert {before[k] for k in ("util", "memory", "sm_clock", "temp", "inflation_p50", "parked", "draining")} == {"n/a"}
    gpu.telemetry = {"util_pct": 87, "mem_used": 40 << 30, "mem_total": 80 << 30, "sm_clock_mhz": 1980,  # type: ignore[attr-defined]
                     "mem_clock_mhz": 2619, "temp_c": 61, "power_w": 512.5, "throttle": ["sw_power_cap"], "simulated": False}
    gpu.canary = {"inside_p50": 0.003, "inside_p95": 0.0158, "outside_p50": 0.4, "outside_p95": 1.2,  # type: ignore[attr-defined]
                  "contention": 0.8, "flagged": True}
    gpu.parked, gpu.draining = 2, 1  # type: ignore[attr-defined]
    gpu.pool = {"size": 4, "idle": 1, "busy": 3, "warming": 0, "replaced": 2}  # type: ignore[attr-defined]
    after = gpu_figures(state, gpu, state.time)
    assert after["util"] == "87%" and after["memory"] == "40.0GiB/80.0GiB" and after["sm_clock"] == "1980MHz"
    assert after["temp"] == "61C" and after["inflation_p50"] == "+0.3%" and after["inflation_p95"] == "+1.6%"
    assert after["parked"] == "2" and after["draining"] == "1"
    model = ConsoleModel(state=state, now=state.time)
    model.history.sample(state)
    row = [str(c) for c in gpu_row(model, gpu).cells.values()]
    assert any(c.startswith("87% ") and c[-1] in "▁▂▃▄▅▆▇█" for c in row) and "+0.3%/+1.6%" in row
    panel = summarize_gpu(model, gpu)
    assert "sw_power_cap" in panel and "busy 3" in panel and "512W" in panel and "+120.0%" in panel


def test_malformed_or_partial_values_are_missing_data() -> None:
    state = replay(read_trace(TRACE))
    gpu = state.gpus[1]
    gpu.telemetry = {"util_pct": None, "mem_used": "?", "temp_c": float("nan"), "throttle": None}  # type: ignore[attr-defined]
    gpu.canary = None  # type: ignore[attr-defined]
    gpu.pool = {"size": 2}  # type: ignore[attr-defined]
    f = gpu_figures(state, gpu, state.time)
    assert f["util"] == f["temp"] == f["memory"] == f["inflation_p95"] == "n/a"
    model = ConsoleModel(state=state, now=state.time)
    assert "pool size 2  idle n/a" in summarize_gpu(model, gpu)
    history = MetricHistory()
    history.sample(state)
    assert history.values(gpu.uuid, "util_pct") == [None]


def test_canary_figures_say_what_they_are() -> None:
    """`flagged` counts clock-flagged samples, not inflated ones; on simulated
    GPUs the inflation figures are labelled as the simulator's (a kernel there
    is a host-timed sleep: host CPU load shows as inflation)."""
    from krex_console.views.gpu_detail import SIMULATOR_NOTE, describe_gpu

    state = replay(read_trace(TRACE))
    gpu = state.gpus[0]
    gpu.canary = {"inside_p50": 0.003, "inside_p95": 2.72, "outside_p50": 0.023, "outside_p95": 1.8,  # type: ignore[attr-defined]
                  "contention": 1.02, "flagged": 0, "samples": 40}
    model = ConsoleModel(state=state, now=state.time)
    assert gpu.simulated
    text = describe_gpu(model, gpu)
    assert "clock-flagged 0/40" in text and SIMULATOR_NOTE in text and "flagged 0 " not in text
    assert SIMULATOR_NOTE in summarize_gpu(model, gpu)
    gpu.simulated = False
    assert SIMULATOR_NOTE not in describe_gpu(model, gpu) and SIMULATOR_NOTE not in summarize_gpu(model, gpu)
