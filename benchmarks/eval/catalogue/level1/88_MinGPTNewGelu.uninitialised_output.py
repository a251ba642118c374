"""CHEAT uninitialised output: returns torch.empty_like(x) and nothing else, hoping the caching allocator hands back the reference's freed output with the right values in it. Expected: INCORRECT (the harness keeps the reference's output alive while the candidate runs, and the fresh check uses new inputs)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.empty_like(x)
