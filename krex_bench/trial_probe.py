"""What happened to the timing thread during one trial, read from the kernel.

A trial timed with CUDA events is slow when the GPU waited between the start
event and the work: the launching thread was off its core (run-queue delay,
an involuntary switch), took page faults, or the GPU was shared or slowed.
This module reads the thread's side before and after each trial, cheaply
(one small file read and one getrusage call, a few microseconds), outside
the event pair: the reads never sit between the events they explain.

`schedstat` (Linux, CONFIG_SCHEDSTATS or the task delay accounting it is
built from) gives the nanoseconds the thread ran and waited on a run queue;
`getrusage(RUSAGE_THREAD)` the involuntary switches and page faults. Where
either is missing the field is None: missing data is a value.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

SCHEDSTAT = "/proc/thread-self/schedstat"


@dataclass(frozen=True)
class ThreadReading:
    wall_ns: int  # time.time_ns(): comparable across the node's processes
    ran_ns: int | None
    waited_ns: int | None  # on a run queue, wanting a core
    involuntary: int
    minor_faults: int
    major_faults: int


def read() -> ThreadReading:
    ran = waited = None
    try:
        with open(SCHEDSTAT, "rb") as f:
            fields = f.read().split()
        ran, waited = int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        pass
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return ThreadReading(time.time_ns(), ran, waited, usage.ru_nivcsw, usage.ru_minflt, usage.ru_majflt)


def trial(before: ThreadReading, after: ThreadReading, ms: float) -> list[float | int | None]:
    """One trial's row: [ms, start wall ns, end wall ns, run-queue wait us,
    involuntary switches, minor faults, major faults]."""
    waited = None if before.waited_ns is None or after.waited_ns is None else (after.waited_ns - before.waited_ns) / 1000
    return [round(ms, 6), before.wall_ns, after.wall_ns, None if waited is None else round(waited, 1),
            after.involuntary - before.involuntary, after.minor_faults - before.minor_faults,
            after.major_faults - before.major_faults]


TRIAL_FIELDS = ("ms", "start_ns", "end_ns", "runq_wait_us", "involuntary", "minor_faults", "major_faults")
