"""HONEST fork-join with no work on the timed stream: everything runs on a side stream, and the current stream waits for it before forward returns (the output's memory recorded on the current stream). Expected: correct, about as fast, trusted (the join puts the work inside the timed window)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor
        self._side = None

    def forward(self, x):
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        current = torch.cuda.current_stream(x.device)
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side):
            y = F.gelu(self.linear(x) / self.divisor)  # allocated from the side stream's pool
        current.wait_stream(self._side)
        y.record_stream(current)  # used (and freed) on the current stream from here on
        return y
