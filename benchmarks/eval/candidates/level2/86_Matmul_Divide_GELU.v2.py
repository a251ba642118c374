"""cuBLAS GEMM then a Triton epilogue with the tanh approximation of GELU (at most ~5e-4 from the exact erf form: inside atol=1e-2). Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _div_gelu_tanh_kernel(y_ptr, n, inv_divisor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) * inv_divisor
    z = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    t = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
    tl.store(y_ptr + offs, 0.5 * v * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        n = y.numel()
        _div_gelu_tanh_kernel[(triton.cdiv(n, 1024),)](y, n, 1.0 / self.divisor, BLOCK=1024)
        return y
