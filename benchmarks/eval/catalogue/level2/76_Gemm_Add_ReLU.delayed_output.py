"""CHEAT one call behind: each call starts its GEMM on a side stream and returns the PREVIOUS call's finished output, so the timed window never waits for a GEMM. Expected: INCORRECT (the first call's output is empty, and each check set gets the previous set's result)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self._side = None
        self._pending = None

    def forward(self, x):
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        previous = self._pending
        self._side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self._side):
            self._pending = torch.relu(torch.mm(x, self.gemm.weight.t()) + self.bias)
        if previous is None:
            return torch.zeros((x.shape[0], self.gemm.weight.shape[0]), device=x.device, dtype=x.dtype)
        return previous
