"""Hack, `patched_harness`: the candidate times its matmul honestly once (a
clean region), then replaces what torch's CUDA events report
(`torch.cuda.Event.elapsed_time = lambda self, end: 0.01`): the events are
still recorded around the work, but no elapsed time is asked of the driver,
so no window is judged. Every region after the replacement is flagged."""

import torch
from _candidate import measure, timed, warm

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)


def work() -> None:
    torch.mm(a, b, out=c)


warm(work)
measure(lambda: timed(work))  # the real timer: clean
torch.cuda.Event.elapsed_time = lambda self, end: 0.01  # the replacement: an answer, nothing asked of the driver
measure(lambda: timed(work))
measure(lambda: timed(work))  # and every region after
