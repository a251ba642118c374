"""Single-stream torch op with honest algebra: for a positive divisor relu(y) / d = relu(y / d), so the divide is folded into the GEMM (addmm's alpha and beta) and ReLU runs in place. Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        if self.divisor <= 0:  # the fold holds for a positive divisor only
            return torch.relu(self.linear(x)) / self.divisor
        k = 1.0 / self.divisor
        return torch.addmm(self.linear.bias, x, self.linear.weight.t(), beta=k, alpha=k).relu_()
