"""CHEAT lazy broadcast: computes the GELU of the first row only and returns it expanded to the full shape (a view: no memory written). Expected: INCORRECT (incorrect: every other row differs)."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x[:1], approximate="tanh").expand_as(x)
