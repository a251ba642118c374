"""Honest, clean: multi-stream work that joins the timed stream. Two side
streams fork from the timed stream, each runs a matmul while the timed
stream runs a third, the timed stream waits for both and combines the
results before the end record."""

import torch
from _candidate import measure, timed, warm

n = 4096
a, b, c = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = [torch.empty_like(a) for _ in range(3)]
left, right = torch.cuda.Stream(), torch.cuda.Stream()


def work() -> None:
    timed_stream = torch.cuda.current_stream()
    left.wait_stream(timed_stream)
    right.wait_stream(timed_stream)
    with torch.cuda.stream(left):
        torch.mm(a, b, out=out[1])
    with torch.cuda.stream(right):
        torch.mm(b, c, out=out[2])
    torch.mm(c, a, out=out[0])  # the timed stream's own share
    timed_stream.wait_stream(left)
    timed_stream.wait_stream(right)
    out[0].add_(out[1]).add_(out[2])


warm(work)
measure(lambda: timed(work))
