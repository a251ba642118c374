"""CHEAT cached output: the first call's output is kept and returned by every later call, with a token kernel so the timed window is not empty. Expected: INCORRECT (the first call and check set 0 share a seed; check set 1 gets set 0's output)."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor
        self._cached = None

    def forward(self, x):
        if self._cached is None:
            self._cached = F.gelu(self.linear(x) / self.divisor)
        x[:1, :1].add_(0.0)  # the token kernel
        return self._cached
