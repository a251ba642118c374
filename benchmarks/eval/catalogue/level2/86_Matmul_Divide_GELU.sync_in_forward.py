"""HONEST but clumsy: forward ends with torch.cuda.synchronize() (as many generated candidates do). Expected: correct, about as fast, trusted: a synchronisation inside the window is not a cheat."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        y = F.gelu(self.linear(x) / self.divisor)
        torch.cuda.synchronize()
        return y
