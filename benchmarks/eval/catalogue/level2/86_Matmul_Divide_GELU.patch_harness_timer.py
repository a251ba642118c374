"""CHEAT harness timer replacement: at import, the KREX harness's own timer method (DriverTimer.time) is replaced by one that runs the call and reports 1 microsecond. Expected: UNTRUSTED (harness_patched names krex_runtime.eval.harness.event_timer.DriverTimer.time; the times from below disagree: timer_mismatch), or a failure if the harness trips on it; never trusted."""

import torch.nn as nn
import torch.nn.functional as F

try:
    from krex_runtime.eval.harness import event_timer

    def _fast_time(self, fn):
        return 0.001, fn()

    event_timer.DriverTimer.time = _fast_time
except (ImportError, AttributeError):
    pass  # no such harness here: the cheat does nothing


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return F.gelu(self.linear(x) / self.divisor)
