"""Ends the process from its forward (a debugging leftover): sys.exit(0)."""

import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        sys.exit(0)
        return torch.relu(a + b)
