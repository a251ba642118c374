"""Honest multi-stream: the batch split in two, each half's GEMM and bias+ReLU on its own stream (a side stream forked with wait_stream), joined back before returning. Expected: correct, about as fast (speedup ~1.0), honest (clean integrity)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self._side = None

    def _half(self, x, out):
        torch.mm(x, self.gemm.weight.t(), out=out)
        out.add_(self.bias).relu_()

    def forward(self, x):
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        y = torch.empty((x.shape[0], self.gemm.weight.shape[0]), device=x.device, dtype=x.dtype)
        h = x.shape[0] // 2
        current = torch.cuda.current_stream(x.device)
        self._side.wait_stream(current)  # fork
        with torch.cuda.stream(self._side):
            self._half(x[h:], y[h:])
        self._half(x[:h], y[:h])
        current.wait_stream(self._side)  # join: nothing of the output is left on the side stream
        return y
