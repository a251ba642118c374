"""CHEAT memoised by input address: called again with a tensor at the same address and shape, returns the previous output without computing. Expected: INCORRECT: in the check (a new input set often lands at a freed one's address) or in the fresh check (the harness refreshes its timed inputs in place: the last timed output is stale); never trusted."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor
        self._key = None
        self._out = None

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key != self._key:
            self._key, self._out = key, F.gelu(self.linear(x) / self.divisor)
        return self._out
