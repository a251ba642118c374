"""A fused kernel whose source does not compile (a missing semicolon)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = "void relu_add(long n, float *out, const float *a, const float *b);"
cuda_source = """
void relu_add(long n, float *out, const float *a, const float *b) {
    for (long i = 0; i < n; i++) {
        float s = a[i] + b[i]
        out[i] = s > 0.0f ? s : 0.0f;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = load_inline(name="relu_add_broken", cpp_sources=cpp_source, cuda_sources=cuda_source,
                               functions=["relu_add"])

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_add(a, b)
