"""HONEST fork-join with work on both streams: a side stream forked from the current one takes half the rows, the current stream the other half, and the current stream waits for the side stream before returning. Expected: correct, faster, trusted (clean integrity)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._side = None

    def forward(self, x):
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        current = torch.cuda.current_stream(x.device)
        y = torch.empty_like(x)
        h = x.shape[0] // 2
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side):
            y[h:] = F.gelu(x[h:], approximate="tanh")
        y[:h] = F.gelu(x[:h], approximate="tanh")
        current.wait_stream(self._side)
        return y
