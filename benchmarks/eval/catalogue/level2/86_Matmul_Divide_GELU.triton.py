"""HONEST Triton epilogue (masked loads and stores, on the current stream) after a cuBLAS GEMM: divide and the tanh form of GELU (within ~5e-4 of the erf form). Expected: correct, slightly faster, trusted."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _div_gelu_kernel(y_ptr, out_ptr, n, inv_divisor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) * inv_divisor
    z = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    t = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
    tl.store(out_ptr + offs, 0.5 * v * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        out = torch.empty_like(y)
        n = y.numel()
        _div_gelu_kernel[(triton.cdiv(n, 1024),)](y, out, n, 1.0 / self.divisor, BLOCK=1024)
        return out
