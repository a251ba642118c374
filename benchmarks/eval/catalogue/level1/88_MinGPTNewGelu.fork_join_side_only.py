"""HONEST fork-join with no work on the timed stream: everything runs on a side stream, and the current stream waits for it before forward returns (its output memory recorded on the current stream). Expected: correct, faster, trusted (the join puts the work inside the timed window)."""

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
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side):
            y = F.gelu(x, approximate="tanh")  # allocated from the side stream's pool
        current.wait_stream(self._side)
        y.record_stream(current)  # used (and freed) on the current stream from here on
        return y
