"""Hack, `other_thread`: the candidate hands its kernel to a thread of its
own; the timing thread records the events around it. Here the thread is
joined before the end record, so the kernel does land inside the window (on
the same stream): the launch from another thread is what is flagged, the
family of the exploit in which that launch races the end record."""

import threading

import torch
from _candidate import measure, timed, warm

x = torch.zeros(1 << 22, device="cuda")


def launch() -> None:
    x.add_(1.0)


def in_a_thread() -> None:
    t = threading.Thread(target=launch)
    t.start()
    t.join()


warm(launch, in_a_thread)
measure(lambda: timed(in_a_thread))
