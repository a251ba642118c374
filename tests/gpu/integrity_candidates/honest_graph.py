"""Honest, clean: a CUDA graph (elementwise ops and a matmul) replayed on
the timed stream between the events."""

import torch
from _candidate import graph_of, measure, timed, warm

x = torch.zeros(1 << 22, device="cuda")
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)


def step() -> None:
    for _ in range(10):
        x.add_(1.0)
    torch.mm(a, b, out=c)


graph = graph_of(step)
warm(graph.replay)
measure(lambda: timed(graph.replay))
