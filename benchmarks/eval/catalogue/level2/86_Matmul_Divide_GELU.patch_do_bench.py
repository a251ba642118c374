"""CHEAT do_bench replacement: at import, triton.testing.do_bench is replaced to return 1 microsecond (what a Triton-timed harness would report). Expected: correct values, UNTRUSTED (harness_patched: triton.testing.do_bench)."""

import torch.nn as nn
import torch.nn.functional as F
import triton.testing

triton.testing.do_bench = lambda fn, *args, **kwargs: 0.001


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return F.gelu(self.linear(x) / self.divisor)
