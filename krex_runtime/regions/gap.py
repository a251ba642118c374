"""The gate's open time between two regions.

When a region is released while another waits, the next entry would close
the gate again within a millisecond: threads of other tenants that the region
held back (parked at the gate, or driver-locked) wake and may find it shut
again, and park once more. Whether they get through is a race, so their work
outside regions (a correctness check, a pooled process's cleanup before its
next command) can wait as long as the queue stays full.

So after a release that held anyone back, the next entry starts no earlier
than `regions.gap_s` after it (0: at once). The work those threads submit in
the gap is drained by the next entry as any other work is: the holder's
measurement is unchanged, and every region costs at most the gap more.
"""

from __future__ import annotations

import asyncio
import time


class Gap:
    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s
        self._open_until = 0.0

    def released(self, held_back: int) -> None:
        """A region was released; `held_back`: other tenants' threads it kept waiting."""
        if held_back > 0 and self.gap_s > 0:
            self._open_until = time.monotonic() + self.gap_s

    async def wait(self) -> float:
        """Before an entry: the rest of the gap, if any; returns the seconds waited."""
        left = self._open_until - time.monotonic()
        if left <= 0:
            return 0.0
        await asyncio.sleep(left)
        return left
