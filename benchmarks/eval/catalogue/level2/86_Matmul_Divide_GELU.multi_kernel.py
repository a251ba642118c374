"""HONEST multiple kernels per forward: a cuBLAS GEMM without bias, then three Triton kernels (bias add, divide, GELU), each its own launch on the current stream. Expected: correct, about as fast or slightly slower, trusted."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bias_kernel(y_ptr, b_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs % cols, mask=mask, other=0.0)
    tl.store(y_ptr + offs, v, mask=mask)


@triton.jit
def _scale_kernel(y_ptr, n, k, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=mask, other=0.0) * k, mask=mask)


@triton.jit
def _gelu_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask, other=0.0)
    z = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    t = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
    tl.store(y_ptr + offs, 0.5 * v * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        y = torch.mm(x, self.linear.weight.t())
        n, cols = y.numel(), y.shape[1]
        grid = (triton.cdiv(n, 1024),)
        _bias_kernel[grid](y, self.linear.bias, n, cols, BLOCK=1024)
        _scale_kernel[grid](y, n, 1.0 / self.divisor, BLOCK=1024)
        _gelu_kernel[grid](y, n, BLOCK=1024)
        return y
