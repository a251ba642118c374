"""The product with torch.mm into a preallocated output."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        return torch.mm(a, b, out=out)
