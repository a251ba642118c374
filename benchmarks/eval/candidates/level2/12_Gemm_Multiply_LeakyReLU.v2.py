"""cuBLAS GEMM then a Triton epilogue (multiply and LeakyReLU in one masked pass, in place). Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_leaky_kernel(y_ptr, n, multiplier, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) * multiplier
    tl.store(y_ptr + offs, tl.where(v > 0, v, v * slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        y = torch.addmm(self.gemm.bias, x, self.gemm.weight.t())
        n = y.numel()
        _scale_leaky_kernel[(triton.cdiv(n, 1024),)](y, n, float(self.multiplier), float(self.negative_slope), BLOCK=1024)
        return y
