"""cuBLAS through torch.matmul on contiguous operands: what the reference does. Expected: correct, about as fast (speedup ~1.0), honest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.contiguous(), B.contiguous())
