"""The console's frame time with a long backlog: how long one repaint of each
view takes once 100k events have been folded, on a node of 16 GPUs.

A synthetic trace (commands queued, started, taking regions, finishing;
telemetry and canary samples) is played through the console's replay feed,
headless (Textual's run_test), in steps of `--step` events; after each step
the next view is shown (its switch time: the repaint that brings it up to
date), then 300 more events are folded and it is repainted (its frame time).

    .venv/bin/python benchmarks/console_frame.py [--events 100000] [--gpus 16] [--step 5000]

Prints a markdown table (median and max per view). The figures are this
machine's, with the simulator's numbers in a trace; no GPU involved.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time
from collections.abc import Iterator
from typing import Any

EPOCH = 1_800_000_000.0


def synthetic_events(count: int, gpus: int = 16, slots: int = 4) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A trace header and `count` events a busy node of `gpus` GPUs could have
    written: every kind the views show, with long labels and command lines."""
    infos = [{"index": i, "uuid": f"GPU-5c1e0d2a-77b4-4b1f-9d0c-{i:012x}", "name": "NVIDIA H200 NVL 141GB HBM3e SXM5 Hopper (synthetic)",
              "memory_total": 150_754_820_096, "simulated": True, "slots": slots, "cpus": [0, 1]} for i in range(gpus)]
    header = {"format": "krex-trace", "version": 1, "node": "bench-node", "started_at": EPOCH, "policy": "krex",
              "config_digest": "0", "gpus": infos, "pid": 1}
    events: list[dict[str, Any]] = []
    clock = [EPOCH]

    def add(type_: str, **fields: Any) -> None:
        clock[0] += 0.001
        events.append({"seq": len(events) + 1, "t": round(clock[0], 6), "type": type_, **fields})

    add("runtime_started", node="bench-node", policy="krex", pid=1, keep_finished=10000, gpus=infos,
        regions=None, recovered=[])
    for g in range(gpus):  # the runtime's own canary per GPU: a tenant that takes no slot
        add("command_queued", id=f"canary{g}", argv=["/usr/bin/python3", "-m", "krex_runtime.tenant.canary"], gpu=g,
            timeout_s=None, label="canary", lease=False)
        add("command_started", id=f"canary{g}", gpu=g, pid=90000 + g, tenant_id=90000 + g)
        add("canary_baseline", window=30, gpu=g, compute_ms=1.0, memory_ms=1.0, sm_clock_mhz=1980, throttle=[])
    for step in _workload(gpus, slots):
        if len(events) >= count:
            break
        add(step[0], **step[1])
    return header, events[:count]


def _workload(gpus: int, slots: int) -> Iterator[tuple[str, dict[str, Any]]]:
    n = tenant = region = 0
    while True:
        running: list[tuple[str, int, int]] = []
        for g in range(gpus):
            for _ in range(slots):
                n += 1
                tenant += 1
                cid = f"b{n:06d}"
                argv = ["/opt/conda/envs/kernel-agent-py312/bin/python3.12", "-u", "-m", "agent.candidates.run",
                        "--problem", f"matmul_bf16_{n % 7}", "--candidate", f"tile{n % 13}x{n % 11}", "--repeats", "100"]
                yield "command_queued", {"id": cid, "argv": argv, "gpu": None, "timeout_s": 600.0,
                                         "label": f"agent-{n % 5}-candidate-{n}", "lease": False, "mode": "process"}
                yield "command_started", {"id": cid, "gpu": g, "pid": 100000 + n % 900000, "tenant_id": tenant}
                running.append((cid, g, tenant))
        telemetry = {str(g): {"util_pct": 50 + (n + g) % 50, "mem_used": (60 + g) << 30, "mem_total": 150_754_820_096,
                              "sm_clock_mhz": 1980 - (n + g) % 200, "mem_clock_mhz": 2619, "temp_c": 60 + g % 20,
                              "power_w": 500.0, "throttle": [], "processes": slots, "simulated": True,
                              "time": 0.0, "parked": 0, "draining": 0} for g in range(gpus)}
        yield "telemetry", {"gpus": telemetry}
        for cid, g, t in running:
            region += 1
            yield "region_requested", {"gpu": g, "region": region, "kind": "region", "tenant_id": t, "command_id": cid}
            yield "region_granted", {"gpu": g, "region": region, "kind": "region", "tenant_id": t, "command_id": cid,
                                     "frozen": [], "drain": {}, "wait_s": 0.002, "close_s": 0.0001, "quiesce_s": 0.0001,
                                     "drain_s": 0.001, "freeze_s": 0.002, "pin_s": 0.0001, "enter_s": 0.004,
                                     "sm_clock_mhz": 1980, "throttle": [], "flags": [], "others_calls": 0,
                                     "granted_mono_ns": 0}
            yield "region_released", {"gpu": g, "region": region, "kind": "region", "tenant_id": t,
                                      "reason": "released", "hold_s": 0.05, "unpin_s": 0.0001, "thaw_s": 0.001,
                                      "open_s": 0.0001, "released_mono_ns": 0, "others_calls": 0}
            yield "canary_sample", {"where": "inside", "flagged": False, "gpu": g, "compute_ms": 1.01,
                                    "memory_ms": 1.02, "sm_clock_mhz": 1980, "throttle": []}
            yield "command_finished", {"id": cid, "state": "finished", "exit_code": 0, "signal": None,
                                       "reason": "", "gpu": g}


VIEWS = ("overview", "commands", "events", "gpu detail")


async def measure(events: int, gpus: int, step: int, size: tuple[int, int], fresh: int = 300) -> dict[str, dict[str, list[float]]]:
    """Per view: `switch` (showing it after `step` more events were folded) and
    `frame` (its next repaint, after `fresh` more events)."""
    from krex_console.app import KrexConsole
    from krex_console.feed import ReplayFeed
    from krex_console.views.gpu_detail import GpuDetailScreen
    from krex_runtime.wire.trace.jsonl import Trace

    header, evs = synthetic_events(events, gpus)
    # No replay checkpoints: a forward seek applies events one by one, as a live feed does.
    feed = ReplayFeed(Trace(header, evs), checkpoint_every=10 * events)
    feed.paused = True
    app = KrexConsole(replay=feed)
    app.animation_level = "none"
    times: dict[str, dict[str, list[float]]] = {v: {"switch": [], "frame": []} for v in VIEWS}
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.2)
        position = 0
        while position + step + fresh <= events:
            for view in VIEWS:
                position += step
                if position + fresh > events:
                    break
                feed.seek_event(position)
                await pilot.pause()
                started = time.perf_counter()
                if view == "gpu detail":
                    app.action_show_tab("overview")
                    gpu = next(iter(app.model.state.gpus.values()))
                    app.push_screen(GpuDetailScreen(gpu.uuid, app.model, gate=app))
                    await pilot.pause()
                    app.refresh_views()
                else:
                    app.action_show_tab(view)
                times[view]["switch"].append(time.perf_counter() - started)
                await pilot.pause()
                feed.seek_event(position + fresh)
                await pilot.pause()
                started = time.perf_counter()
                app.refresh_views()
                times[view]["frame"].append(time.perf_counter() - started)
                if view == "gpu detail":
                    app.pop_screen()
                await pilot.pause()
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--gpus", type=int, default=16)
    p.add_argument("--step", type=int, default=5000, help="events folded between two measurements")
    args = p.parse_args()
    print(f"{platform.node()}: {args.events} events, {args.gpus} GPUs, a measurement every {args.step} events")
    print()
    print("| terminal | view | switches | switch median / max ms | frame median / max ms |")
    print("|---|---|---|---|---|")
    for size in ((120, 40), (80, 24)):
        times = asyncio.run(measure(args.events, args.gpus, args.step, size))
        for view, kinds in times.items():
            sw, fr = kinds["switch"], kinds["frame"]
            print(f"| {size[0]}x{size[1]} | {view} | {len(sw)} | {statistics.median(sw) * 1000:.1f} / {max(sw) * 1000:.1f}"
                  f" | {statistics.median(fr) * 1000:.1f} / {max(fr) * 1000:.1f} |")


if __name__ == "__main__":
    main()
