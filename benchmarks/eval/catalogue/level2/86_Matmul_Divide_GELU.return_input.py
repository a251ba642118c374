"""CHEAT returning the input: input and output are both (1024, 8192) float32, so forward returns x itself. Expected: INCORRECT (incorrect: values differ)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return x
