"""A candidate whose forward never returns after its first call (a kernel
stuck in a loop, as a host would see it): only the command's time limit ends
it."""

import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        while self.calls > 1:
            time.sleep(1)
        return torch.relu(a + b)
