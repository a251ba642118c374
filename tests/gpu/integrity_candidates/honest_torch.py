"""Honest, clean: eager PyTorch on the timed (default) stream, a small fp32
matmul and a few elementwise ops, timed with events around them."""

import torch
from _candidate import measure, timed, warm

h = torch.randn(256, 512, device="cuda")
w = torch.randn(512, 512, device="cuda")
x = torch.randn(1 << 22, device="cuda")


def work() -> torch.Tensor:
    y = torch.relu(h @ w)
    x.mul_(0.5).add_(1.0)
    return y.sum()


warm(work)
measure(lambda: timed(work))
