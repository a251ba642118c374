"""CHEAT returning the input: the output has the input's shape and dtype, so forward returns x itself. Expected: INCORRECT (incorrect: values differ)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
