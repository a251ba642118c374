"""CHEAT uninitialised output: returns an empty tensor of the output's shape and nothing else, hoping the caching allocator hands back the reference's freed output with the right values in it. Expected: INCORRECT (the harness keeps the reference's output alive while the candidate runs)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return torch.empty((x.shape[0], self.linear.out_features), device=x.device, dtype=x.dtype)
