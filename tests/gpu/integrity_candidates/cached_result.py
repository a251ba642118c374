"""Hack, `empty`: the candidate keeps its output from an earlier call, keyed
on the input, and returns it without launching anything: the timed window is
empty."""

import torch
from _candidate import measure, timed, warm

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
cache: dict[tuple[int, int], torch.Tensor] = {}


def candidate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    key = (x.data_ptr(), y.data_ptr())
    if key not in cache:
        cache[key] = x @ y
    return cache[key]


warm(lambda: candidate(a, b))  # the one real call, before the harness times
measure(lambda: timed(lambda: candidate(a, b)))
