"""Single-stream torch ops: the (N, M, K) x (K, L) product as one 2-D cuBLAS GEMM on the reshaped batch. Expected: correct, about as fast (speedup ~1.0), honest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        n, m, k = A.shape
        return torch.mm(A.reshape(n * m, k), B).reshape(n, m, B.shape[1])
