"""A candidate that is not Python (an unclosed parenthesis)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu((a + b)
