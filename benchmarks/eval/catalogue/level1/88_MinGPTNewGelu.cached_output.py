"""CHEAT cached output: the first call's output is kept and returned by every later call, with a token kernel so the timed window is not empty. Expected: INCORRECT (the check's second input set gets the first set's output)."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._cached = None

    def forward(self, x):
        if self._cached is None:
            self._cached = F.gelu(x, approximate="tanh")
        x[:1, :1].add_(0.0)  # the token kernel
        return self._cached
