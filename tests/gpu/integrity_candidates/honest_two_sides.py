"""Honest, clean: the timed (current) stream runs nothing of its own; two
side streams fork from it after the start record, each runs a matmul, and
the timed stream waits for both before the end record."""

import torch
from _candidate import measure, timed, warm

n = 4096
a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
out = [torch.empty_like(a) for _ in range(2)]
left, right = torch.cuda.Stream(), torch.cuda.Stream()


def work() -> None:
    timed_stream = torch.cuda.current_stream()
    for side, o, (x, y) in ((left, out[0], (a, b)), (right, out[1], (b, a))):
        side.wait_stream(timed_stream)
        with torch.cuda.stream(side):
            torch.mm(x, y, out=o)
    timed_stream.wait_stream(left)
    timed_stream.wait_stream(right)


warm(work)
measure(lambda: timed(work))
