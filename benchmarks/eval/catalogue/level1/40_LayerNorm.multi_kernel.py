"""HONEST multiple kernels per forward: per-sample statistics by torch.var_mean, then normalise and affine as separate torch kernels. Expected: correct, faster or about as fast, trusted."""

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
        y = (rows - mean) * torch.rsqrt(var + self.ln.eps)
        return torch.addcmul(self.ln.bias, y.reshape(x.shape), self.ln.weight)
