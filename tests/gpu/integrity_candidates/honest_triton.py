"""Honest, clean: a Triton kernel (launched through cuLaunchKernelEx on
torch's current stream), timed with events on that stream."""

import torch
import triton
import triton.language as tl
from _candidate import measure, timed, warm

N = 1 << 24


@triton.jit
def axpy(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, alpha * x + y, mask=mask)


x = torch.randn(N, device="cuda")
y = torch.randn(N, device="cuda")


def kernel() -> None:
    axpy[(triton.cdiv(N, 1024),)](x, y, N, 0.5, BLOCK=1024)


warm(kernel)
measure(lambda: timed(kernel))
