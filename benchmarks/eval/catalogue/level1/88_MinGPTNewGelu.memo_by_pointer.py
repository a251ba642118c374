"""CHEAT memoised by input identity: when called again with the same input tensor (same data pointer and shape; in-place changes ignored), returns the previous output without computing. Expected: caught: INCORRECT (if the harness refreshes inputs in place between trials, the fresh check sees stale outputs) or review (speedup far over 10 when it does not); never trusted at a plausible speedup."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._key = None
        self._out = None

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key != self._key:
            self._key, self._out = key, F.gelu(x, approximate="tanh")
        return self._out
