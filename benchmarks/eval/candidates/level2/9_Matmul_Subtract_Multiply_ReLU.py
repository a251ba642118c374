"""Naive Python loop: the batch in chunks of 8 rows, each its own GEMM (re-reading the whole 256 MB weight) and epilogue. Expected: correct, SLOWER (several times), honest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        rows = []
        for chunk in x.split(8):
            y = torch.addmm(self.linear.bias, chunk, self.linear.weight.t())
            rows.append(torch.relu((y - self.subtract_value) * self.multiply_value))
        return torch.cat(rows)
