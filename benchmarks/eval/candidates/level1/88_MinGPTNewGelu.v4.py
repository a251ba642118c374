"""Honest multi-stream: a side stream forked from the current one (wait_stream), each stream runs a Triton GELU on half of the rows, joined back before returning. Expected: correct, faster, honest (clean integrity)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    z = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)


def _gelu_into(x, y):
    n = x.numel()
    if n:
        _gelu_tanh_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._side = None

    def forward(self, x):
        x = x.contiguous()
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        y = torch.empty_like(x)  # allocated on the current stream: its memory stays that stream's
        half = x.shape[0] // 2
        current = torch.cuda.current_stream(x.device)
        self._side.wait_stream(current)  # fork: x and y are ready before the side stream reads them
        with torch.cuda.stream(self._side):
            _gelu_into(x[half:], y[half:])
        _gelu_into(x[:half], y[:half])
        current.wait_stream(self._side)  # join: the current stream (the timer's) waits for the side work
        return y
