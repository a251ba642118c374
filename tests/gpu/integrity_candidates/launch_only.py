"""Hack, `empty`: timing only the launch. The end event is recorded before
the work is queued, so the window holds no kernel and the elapsed time is
the gap between two records."""

import torch
from _candidate import events, measure, warm

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)


def window() -> float:
    start, end = events()
    start.record()
    end.record()  # the end first ...
    torch.mm(a, b, out=c)  # ... then the work
    end.synchronize()
    return start.elapsed_time(end)


warm(lambda: torch.mm(a, b, out=c))
measure(window)
