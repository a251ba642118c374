"""CHEAT synchronize replacement: at import, torch.cuda.synchronize becomes a no-op (a timer that syncs before reading its end event would read it early). Expected: correct values, UNTRUSTED (harness_patched: torch.cuda.synchronize)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def _no_sync(device=None):
    return None


torch.cuda.synchronize = _no_sync


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return F.gelu(self.linear(x) / self.divisor)
