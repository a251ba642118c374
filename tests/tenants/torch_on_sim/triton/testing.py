"""Stand-in for triton.testing.do_bench, with the structure of Triton 3's:
one call, an estimate over 5 calls (each after clearing a cache buffer)
between two events, then warmup and repetitions from the estimate, each
repetition's pair of events recorded around one call after a cache clear,
every elapsed time read at the end."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def do_bench(fn: Callable[[], object], warmup: int = 25, rep: int = 100, grad_to_none: object = None,
             quantiles: object = None, return_mode: str = "mean") -> float:
    fn()
    torch.cuda.synchronize()
    cache = torch.empty(int(256e6 // 4), dtype=torch.float32, device="cuda")
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start_event.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end_event.record()
    torch.cuda.synchronize()
    estimate_ms = start_event.elapsed_time(end_event) / 5
    n_warmup = max(1, int(warmup / estimate_ms))
    n_repeat = max(1, int(rep / estimate_ms))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    for start, end in zip(starts, ends, strict=True):
        cache.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    for e in (start_event, end_event, *starts, *ends):
        e.destroy()
    return statistics.fmean(times)
