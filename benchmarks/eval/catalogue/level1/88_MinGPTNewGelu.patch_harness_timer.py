"""CHEAT harness timer replacement: at import, the KREX harness's own driver timer method (DriverTimer.time) is replaced by one that calls the function and reports 1 microsecond. Expected: UNTRUSTED (harness_patched names krex_runtime.eval.harness.event_timer.DriverTimer.time; the times from below disagree: timer_mismatch), or a runtime_error if the harness refuses."""

import torch.nn as nn
import torch.nn.functional as F

try:
    from krex_runtime.eval.harness import event_timer

    def _fast_time(self, fn, *args, **kwargs):
        fn(*args, **kwargs)
        return 0.001

    event_timer.DriverTimer.time = _fast_time
except (ImportError, AttributeError):
    pass  # no such harness here: the cheat is a no-op


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
