"""HONEST fork-join with work on both streams: a side stream forked from the current one (wait_stream) takes half the batch, the current stream the other half, and the current stream waits for the side stream before returning. Expected: correct, about as fast (speedup ~1.0), trusted (clean integrity)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor
        self._side = None

    def _half(self, x, out):
        out.copy_(F.gelu(self.linear(x) / self.divisor))

    def forward(self, x):
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        current = torch.cuda.current_stream(x.device)
        y = torch.empty((x.shape[0], self.linear.out_features), device=x.device, dtype=x.dtype)
        h = x.shape[0] // 2
        self._side.wait_stream(current)  # fork
        with torch.cuda.stream(self._side):
            self._half(x[h:], y[h:])
        self._half(x[:h], y[:h])
        current.wait_stream(self._side)  # join
        return y
