"""CHEAT special-cased check: computes honestly for the first 6 calls (the first forward and the 5 check sets), then returns the last output without computing. Expected: INCORRECT through the fresh check (the last timed trial's output disagrees with the reference on its inputs)."""

import torch.nn as nn
import torch.nn.functional as F

HONEST_CALLS = 6


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor
        self._calls = 0
        self._last = None

    def forward(self, x):
        self._calls += 1
        if self._calls <= HONEST_CALLS or self._last is None or self._last.shape[0] != x.shape[0]:
            self._last = F.gelu(self.linear(x) / self.divisor)
            return self._last
        x[:1, :1].add_(0.0)  # a token kernel in the timed window
        return self._last
