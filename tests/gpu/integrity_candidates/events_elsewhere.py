"""Hack, `stream_mismatch`: the events are recorded on a stream that runs no
kernel; the work runs on another stream, forked from and joined to the
events' stream, so it is not `escaped`, but none of the window's launches is
on the stream the events measure."""

import torch
from _candidate import measure, timed, warm

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
clock, worker = torch.cuda.Stream(), torch.cuda.Stream()


def work() -> None:
    worker.wait_stream(clock)
    with torch.cuda.stream(worker):
        torch.mm(a, b, out=c)
    clock.wait_stream(worker)


warm(work)
measure(lambda: timed(work, clock))
