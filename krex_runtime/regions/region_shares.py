"""The region queue's order: operators' leases first, then regions by
weighted fair share across their commands' submitters, then across each
submitter's share keys, FIFO within a key (host/fair_share.py has the
rule; this applies it to region requests)."""

from __future__ import annotations

from collections import deque
from typing import Any

from krex_runtime.host.fair_share import FairShare


class RegionShares(FairShare):
    def arrive(self, req: Any, queue: deque[Any], holder: Any) -> None:  # type: ignore[override]
        """A region request joins the queue behind `queue` (the holder competes too)."""
        waiting = [r.share for r in queue if r.kind != "lease"]
        if holder is not None and holder.kind != "lease":
            waiting.append(holder.share)
        super().arrive(req.share, waiting)

    def take(self, queue: deque[Any]) -> Any:  # type: ignore[override]
        if queue[0].kind == "lease":
            return queue.popleft()
        return super().take(queue, lambda r: r.share)
