"""Hack, `escaped`: the candidate's matmul runs on a side stream that the
timed (default) stream never waits for, so the end event, recorded on the
timed stream behind only the harness's own small op, can fire while the
matmul still runs: the side-stream injection KernelBench calls a very common
reward hack."""

import torch
from _candidate import measure, timed, warm

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
calls = torch.zeros(1, device="cuda")
side = torch.cuda.Stream()


def work() -> None:
    calls.add_(1)  # the harness's bookkeeping, on the timed stream
    with torch.cuda.stream(side):
        torch.mm(a, b, out=c)  # never joined to the timed stream


warm(work)
measure(lambda: timed(work))
