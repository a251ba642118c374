"""GroupNorm in torch ops with the WRONG epsilon (1e-2 instead of 1e-5: ~4% off where the group variance is ~0.1). Expected: INCORRECT (incorrect), honest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, num_groups, hardtanh_min, hardtanh_max):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max

    def forward(self, x):
        y = self.gemm(x)
        rows, C = y.shape
        g = y.reshape(rows, self.group_norm.num_groups, -1)
        var, mean = torch.var_mean(g, dim=2, keepdim=True, correction=0)
        y = ((g - mean) / torch.sqrt(var + 1e-2)).reshape(rows, C)  # the bug: eps 1e-2
        y = y * self.group_norm.weight + self.group_norm.bias
        return torch.clamp(y, self.hardtanh_min, self.hardtanh_max)
