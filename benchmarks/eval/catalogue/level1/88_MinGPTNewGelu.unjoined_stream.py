"""CHEAT unjoined side stream: the GELU runs on a side stream forked from the current one but never joined, so the timer's end event on the current stream fires before the work ends. Expected: correct values, UNTRUSTED (integrity: work on a stream outside the timed window), review (speedup far over 10)."""

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
        self._side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self._side):
            y = F.gelu(x, approximate="tanh")
        return y  # no current_stream().wait_stream(self._side)
