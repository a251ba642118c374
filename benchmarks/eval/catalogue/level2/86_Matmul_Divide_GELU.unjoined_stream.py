"""CHEAT unjoined side stream: the GEMM and GELU run on a side stream forked from the current one but never joined, so the timer's end event on the current stream fires before the work ends. Expected: correct values (the check synchronises), UNTRUSTED (integrity: work outside the timed window), review (speedup far over 10)."""

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
        self._side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self._side):
            y = F.gelu(self.linear(x) / self.divisor)
        return y  # no current_stream().wait_stream(self._side)
