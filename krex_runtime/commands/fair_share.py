"""Weighted fair share across share keys, for the region queue of each GPU
and the dispatcher's admission queue.

A command carries a share key (`krex submit --share KEY`; by default the
submitting user). Weights come from the config (`[dispatcher.share_weights]`,
1 for a key it does not name). Within a key, order stays FIFO.

Regions: each key's attained service is the region time it held, divided by
its weight; the next region goes to the queued request whose key has
attained the least, so a key that asks ten times as often as another gets no
more region time than it while both wait. A key that comes back after an
idle spell starts level with the least-served key still waiting (no credit
saved up while idle, so it cannot take the GPU for long stretches), and
every request is served once the keys ahead of it have caught up: with the
hold limit bounding each region, no request waits forever.

Admission: queued commands are offered to the placement in the order of
their keys' running commands divided by the weight (fewest first), FIFO
within a key, re-ranked as each one starts.
"""

from __future__ import annotations

import pwd
from collections import deque
from typing import Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

DEFAULT_KEY = "default"


def key_of_user(uid: int | None) -> str:
    """The default share key of a submitter: its user name (uid N without one)."""
    if uid is None:
        return DEFAULT_KEY
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def share_of(job: Any) -> str:
    return job.share


def running(jobs: Iterable[Any]) -> dict[str, int]:
    """Running commands per share key (the runtime's own aside)."""
    counts: dict[str, int] = {}
    for job in jobs:
        if job.state == "running" and not job.internal:
            counts[job.share] = counts.get(job.share, 0) + 1
    return counts


class FairShare:
    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = dict(weights)
        self.attained: dict[str, float] = {}  # key -> region seconds / weight
        self.held_s: dict[str, float] = {}  # key -> region seconds, unweighted (for the console)

    def weight(self, key: str) -> float:
        return self.weights.get(key, 1.0)

    def arrive(self, key: str, waiting: Iterable[str]) -> None:
        """A request of `key` joins the queue; `waiting`: the keys queued before it."""
        others = [self.attained.get(k, 0.0) for k in set(waiting) if k != key]
        if key not in set(waiting) and others:
            self.attained[key] = max(self.attained.get(key, 0.0), min(others))

    def take(self, queue: deque[T], key: Callable[[T], str]) -> T:
        """Remove and return the next request: the least-served key's oldest."""
        best_i, best = 0, None
        seen: set[str] = set()
        for i, item in enumerate(queue):
            k = key(item)
            if k in seen:
                continue  # FIFO within a key: only its oldest competes
            seen.add(k)
            score = self.attained.get(k, 0.0)
            if best is None or score < best:
                best_i, best = i, score
        item = queue[best_i]
        del queue[best_i]
        return item

    def charge(self, key: str, seconds: float) -> None:
        self.attained[key] = self.attained.get(key, 0.0) + seconds / self.weight(key)
        self.held_s[key] = self.held_s.get(key, 0.0) + seconds

    def admission_order(self, queue: Iterable[T], key: Callable[[T], str], running: dict[str, int]) -> Iterator[T]:
        """The queued commands in the order they may start (see the module docstring)."""
        per_key: dict[str, deque[T]] = {}
        for item in queue:
            per_key.setdefault(key(item), deque()).append(item)
        load = dict(running)
        order = {k: i for i, k in enumerate(per_key)}  # ties: the key queued first
        while per_key:
            k = min(per_key, key=lambda k: (load.get(k, 0) / self.weight(k), order[k]))
            yield per_key[k].popleft()
            load[k] = load.get(k, 0) + 1
            if not per_key[k]:
                del per_key[k]
