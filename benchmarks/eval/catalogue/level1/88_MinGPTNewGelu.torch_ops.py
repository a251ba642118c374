"""HONEST single-stream torch ops: the tanh-GELU as torch's own fused kernel (F.gelu approximate="tanh"). Expected: correct, faster (one pass instead of about eight), trusted."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
