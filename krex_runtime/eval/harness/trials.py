"""Input sets and timed trials.

An input set is the problem's `get_inputs()` after `torch.manual_seed(s)`,
made with the device as torch's default device (its tensors are made on the
GPU; any made elsewhere are moved there) and floating ones cast to the
evaluation's dtype. Seeds: construction `seed`, check set i
`seed + i`, the warm-up `seed + TRIAL_SEEDS - 1`, timed trial k
`seed + TRIAL_SEEDS + k` (the same for both models), the fresh set one drawn
at random (a candidate cannot know it).

A model is timed on ONE input set whose tensors keep their storage: before
each trial they are refreshed in place with the next trial seed's values,
then the L2 cache is flushed by writing a buffer larger than any GPU's L2
(the refresh's own writes are flushed with everything else, so each trial
starts cold), then one window: start event, the call, end event, wait for
the end. Refresh and flush run before the start event on the same stream,
outside the window. A candidate that keys a stored output on its inputs'
addresses sees the same addresses every trial: the fresh check catches it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from krex_runtime.eval.harness.event_timer import DriverTimer

TRIAL_SEEDS = 1_000_000
FLUSH_BYTES = 256 << 20  # over the L2 of any GPU (H100: 50 MiB; B200: 126 MiB)


@dataclass
class Trials:
    times_ms: list[float]
    last_output: Any
    stream: int


def _on_device(torch: Any, device: str) -> Any:
    """torch.device as a context manager (torch >= 2.0): the problem's
    factory calls (`torch.randn(...)`) make their tensors on the GPU, with its
    generator, instead of on the host and copied: a trial's fresh inputs
    cost a kernel, not seconds of host random numbers."""
    where = torch.device(device)
    return where if hasattr(where, "__enter__") else contextlib.nullcontext()


def make_inputs(torch: Any, get_inputs: Callable[[], Any], seed: int, device: str, dtype: Any) -> list[Any]:
    torch.manual_seed(seed)
    made = []
    with _on_device(torch, device):
        inputs = list(get_inputs())
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if x.is_floating_point() and x.dtype != dtype:
                x = x.to(dtype)
        made.append(x)
    return made


def refresh(torch: Any, inputs: list[Any], get_inputs: Callable[[], Any], seed: int, device: str, dtype: Any) -> None:
    """New values into the tensors of `inputs`, in place (same storage)."""
    for dst, src in zip(inputs, make_inputs(torch, get_inputs, seed, device, dtype)):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)


def flush_buffer(torch: Any, device: str) -> Any:
    return torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device)


def run_trials(torch: Any, model: Callable[..., Any], inputs: list[Any], get_inputs: Callable[[], Any],
               seed: int, device: str, dtype: Any, trials: int, warmup: int) -> Trials:
    """Warm-up calls, then `trials` timed windows on torch's current stream."""
    flush = flush_buffer(torch, device)
    # The warm-up's values are none of the trials': an output stored in the warm-up is wrong in every trial.
    refresh(torch, inputs, get_inputs, seed + TRIAL_SEEDS - 1, device, dtype)
    for _ in range(warmup):
        model(*inputs)
    torch.cuda.synchronize()
    stream = int(torch.cuda.current_stream().cuda_stream or 0)
    timer = DriverTimer(stream)
    times, out = [], None
    try:
        for k in range(trials):
            refresh(torch, inputs, get_inputs, seed + TRIAL_SEEDS + k, device, dtype)
            flush.zero_()
            ms, out = timer.time(lambda: model(*inputs))
            times.append(ms)
    finally:
        timer.close()
    torch.cuda.synchronize()
    return Trials(times, out, stream)
