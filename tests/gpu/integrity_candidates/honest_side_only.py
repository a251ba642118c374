"""Honest, clean: the events are recorded on a stream that runs no kernel
of its own; all the work runs on another stream, forked from the events'
stream after the start record and joined back to it before the end record
(torch's `wait_stream` both ways): the window holds the work, whole."""

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
