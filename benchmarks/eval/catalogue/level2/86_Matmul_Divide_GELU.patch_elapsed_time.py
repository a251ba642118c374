"""CHEAT timer replacement: at import, torch.cuda.Event.elapsed_time is replaced to report 1 microsecond; the computation is the reference's. Expected: correct values, UNTRUSTED (harness_patched: torch.cuda.Event.elapsed_time); the harness's driver timer is not fooled (speedup ~1.0)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.cuda.Event.elapsed_time = lambda self, end_event: 0.001


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return F.gelu(self.linear(x) / self.divisor)
