"""LayerNorm in torch ops with the WRONG epsilon (1e-2 instead of 1e-5: ~5% off for variance 1/12). Expected: INCORRECT (incorrect), honest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        inner = self.ln.weight.numel()
        rows = x.reshape(-1, inner)
        var, mean = torch.var_mean(rows, dim=1, keepdim=True, correction=0)
        y = (rows - mean) / torch.sqrt(var + 1e-2)  # the bug: eps 1e-2
        return y.reshape(x.shape) * self.ln.weight + self.ln.bias
