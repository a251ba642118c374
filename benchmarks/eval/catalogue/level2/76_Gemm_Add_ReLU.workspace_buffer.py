"""HONEST persistent workspace: the GEMM writes into a buffer allocated once (per shape) and kept; the epilogue writes a fresh output from it. Buffers are cached, results are not. Expected: correct, about as fast, trusted."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self._workspace = None

    def forward(self, x):
        shape = (x.shape[0], self.gemm.weight.shape[0])
        ws = self._workspace
        if ws is None or ws.shape != shape or ws.device != x.device:
            ws = self._workspace = torch.empty(shape, device=x.device, dtype=x.dtype)
        torch.mm(x, self.gemm.weight.t(), out=ws)
        return torch.relu(ws + self.bias)  # a new tensor each call: the workspace is never returned
