"""HONEST cuBLAS via torch.matmul, then bias add and ReLU in place (single stream). Expected: correct, about as fast (speedup ~1.0), trusted."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.matmul(x, self.gemm.weight.t()).add_(self.bias).relu_()
