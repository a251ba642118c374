"""CHEAT lazy broadcast: computes the first row only and returns it expanded to the full shape (a view: no memory written). Expected: INCORRECT (incorrect: every other row differs)."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return F.gelu(self.linear(x[:1]) / self.divisor).expand(x.shape[0], -1)
