"""HONEST single-stream torch ops: the divide folded into the GEMM (addmm's alpha and beta), then torch's GELU. Expected: correct, slightly faster (one elementwise pass fewer), trusted."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        k = 1.0 / self.divisor
        return F.gelu(torch.addmm(self.linear.bias, x, self.linear.weight.t(), beta=k, alpha=k))
