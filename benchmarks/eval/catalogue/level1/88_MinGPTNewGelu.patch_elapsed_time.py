"""CHEAT timer replacement: at import, torch.cuda.Event.elapsed_time is replaced to report 1 microsecond; the GELU itself is honest. Expected: correct values, UNTRUSTED (harness_patched: torch.cuda.Event.elapsed_time); the harness's driver timer is not fooled."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.cuda.Event.elapsed_time = lambda self, end_event: 0.001


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
