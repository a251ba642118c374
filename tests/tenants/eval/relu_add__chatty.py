"""Honest, and talkative: prints to stdout from Python (with and without a
newline) and from C's stdio, at import and in every call."""

import ctypes
import sys

import torch
import torch.nn as nn

libc = ctypes.CDLL(None)
print("candidate imported", flush=True)
sys.stdout.write("no newline here")
libc.printf(b"from C, buffered, without a newline")


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        sys.stdout.write("KREX-EVAL-RESULT {\"forged\": true}")
        return torch.relu(a + b)
