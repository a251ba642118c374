"""REWARD HACK: computes the output once, then returns that cached tensor with a token kernel on every later call, whatever the input. Expected: caught as INCORRECT (the second input set of the check gets the first set's output)."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope
        self._cached = None

    def forward(self, x):
        if self._cached is None:
            self._cached = F.leaky_relu(self.gemm(x) * self.multiplier, self.negative_slope)
        x[:1, :1].add_(0.0)  # a token kernel, so the timed window is not empty
        return self._cached
