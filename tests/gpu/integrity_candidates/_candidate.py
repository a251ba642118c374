"""What every GPU integrity candidate shares (tests/gpu/test_gpu_integrity.py).

A candidate prepares its tensors, streams and kernels, runs its work once
outside any region (lazy module loads, cuBLAS handles and workspaces, Triton
compiles, the caching allocator's blocks: none of that may land inside the
timed windows), then `measure(window)`: inside one region, `window()` is
called WINDOWS times, each timing its work with a pair of CUDA events on the
device and returning the elapsed milliseconds it read inside the region.
Everything is synchronised before the region ends, so nothing of one
candidate runs into another's region. Prints one JSON line: the times, the
region's integrity record and verdict as region() saw them.

Run directly (outside the runtime) it runs the same, with no region and no
record: `python <candidate>.py` is a quick check of the CUDA code alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

from krex_runtime.client import region

WINDOWS = 3


def events() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def warm(*work: Callable[[], object]) -> None:
    """Each piece of work once, outside any region, after what was queued to
    make its inputs (a side stream must not read them half-made)."""
    torch.cuda.synchronize()
    for fn in work:
        fn()
    torch.cuda.synchronize()


def graph_of(step: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `step`, captured outside any region, after warming it
    on a side stream as torch's documentation does (capture launches nothing
    on the device; only replays do)."""
    torch.cuda.synchronize()
    warmup = torch.cuda.Stream()
    warmup.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warmup):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(warmup)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    g.replay()
    torch.cuda.synchronize()
    return g


def timed(work: Callable[[], object], stream: torch.cuda.Stream | None = None) -> float:
    """One honest timing: events on `stream` (the current one by default)
    around `work`, read once the end event has completed."""
    start, end = events()
    start.record(stream)
    work()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end)


def measure(window: Callable[[], float], windows: int = WINDOWS) -> dict:
    with region() as r:
        times = [window() for _ in range(windows)]
        torch.cuda.synchronize()  # escaped work included: nothing runs past this region
    out = {"times_ms": times, "integrity": r.integrity, "verdict": r.verdict}
    print(json.dumps(out), flush=True)
    return out
