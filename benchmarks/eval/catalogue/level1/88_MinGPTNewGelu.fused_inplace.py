"""HONEST in-place torch ops, no torch.compile: the formula evaluated into one scratch tensor with in-place ops (fewer allocations than the reference; the same number of passes). Expected: correct, about as fast (speedup ~1.0), trusted."""

import math

import torch.nn as nn

C = math.sqrt(2.0 / math.pi)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        t = x * x                    # x^2
        t.mul_(x).mul_(0.044715)     # 0.044715 x^3
        t.add_(x).mul_(C).tanh_()    # tanh(c (x + 0.044715 x^3))
        t.add_(1.0).mul_(x).mul_(0.5)
        return t
