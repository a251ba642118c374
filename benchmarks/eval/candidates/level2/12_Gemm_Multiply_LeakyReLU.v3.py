"""Torch ops with the WRONG LeakyReLU slope (0.01, the default, instead of the problem's 0.1). Expected: INCORRECT (incorrect), honest."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier

    def forward(self, x):
        return F.leaky_relu(self.gemm(x) * self.multiplier, negative_slope=0.01)  # the bug: the default slope
