"""Hack, `stream_mismatch`: the events are recorded on a stream that runs no
kernel of the window, kept busy by a kernel queued just before the start
record; the work runs on another stream that never waits for the start
(it is joined back before the end record, so it is not `escaped`). It runs
while the events' stream is still busy, before the start event fires: the
time read is the tail of the work, or nothing."""

import torch
from _candidate import measure, timed, warm

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c, busy = torch.empty_like(a), torch.empty_like(a)
clock, worker = torch.cuda.Stream(), torch.cuda.Stream()


def keep_clock_busy() -> None:
    with torch.cuda.stream(clock):
        torch.mm(b, a, out=busy)


def work() -> None:
    with torch.cuda.stream(worker):  # no worker.wait_stream(clock): it starts at once
        torch.mm(a, b, out=c)
    clock.wait_stream(worker)


def window() -> float:
    keep_clock_busy()  # before the start record: in the region, not in the window
    return timed(work, clock)


warm(keep_clock_busy, work)
measure(window)
