"""cuBLAS GEMM (torch.addmm) then a Triton epilogue: ReLU and divide in one masked in-place pass. Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_div_kernel(y_ptr, n, inv_divisor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0) * inv_divisor, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        n = y.numel()
        _relu_div_kernel[(triton.cdiv(n, 1024),)](y, n, 1.0 / self.divisor, BLOCK=1024)
        return y
