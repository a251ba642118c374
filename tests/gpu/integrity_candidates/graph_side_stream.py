"""Hack, `escaped`: a CUDA graph replayed on a side stream that the timed
stream never waits for (only the harness's small op is on the timed
stream): launches reached through graphs count like kernels."""

import torch
from _candidate import graph_of, measure, timed, warm

x = torch.zeros(1 << 22, device="cuda")
calls = torch.zeros(1, device="cuda")
side = torch.cuda.Stream()


def step() -> None:
    for _ in range(10):
        x.add_(1.0)


graph = graph_of(step)


def work() -> None:
    calls.add_(1)  # the harness's bookkeeping, on the timed stream
    with torch.cuda.stream(side):
        graph.replay()  # never joined to the timed stream


warm(work)
measure(lambda: timed(work))
