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

Admission: start-time fair queueing over commands. Each submitted command
gets a tag, max(the tag of the command started last, its key's previous
tag + 1/weight); queued commands are offered to the placement by tag, FIFO
among equal ones. So a key with commands queued gets its turn within one
start of every other key's, however many the others queued before it.
"""

from __future__ import annotations

import heapq
import pwd
from collections import deque
from typing import Callable, Iterable, Iterator, TypeVar

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


class FairShare:
    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = dict(weights)
        self.attained: dict[str, float] = {}  # key -> region seconds / weight
        self.held_s: dict[str, float] = {}  # key -> region seconds, unweighted (for the console)
        self.started_tag = 0.0  # admission: the tag of the command offered last
        self.next_tag: dict[str, float] = {}  # admission: key -> the tag its next command starts from

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

    def tag(self, key: str) -> float:
        """The admission tag of a command of `key` submitted now."""
        tag = max(self.started_tag, self.next_tag.get(key, 0.0))
        self.next_tag[key] = tag + 1.0 / self.weight(key)
        return tag

    def started(self, tag: float) -> None:
        """A command of this tag started."""
        self.started_tag = max(self.started_tag, tag)

    def admission_order(self, queue: Iterable[T], key: Callable[[T], str], tag: Callable[[T], float]) -> Iterator[T]:
        """The queued commands in the order they may start: by tag, FIFO within a key
        (and among equal tags, the key queued first). Lazy: the placement stops early."""
        per_key: dict[str, deque[T]] = {}
        for item in queue:
            per_key.setdefault(key(item), deque()).append(item)
        heads = [(tag(d[0]), i, k) for i, (k, d) in enumerate(per_key.items())]
        heapq.heapify(heads)
        while heads:
            _, i, k = heapq.heappop(heads)
            items = per_key[k]
            yield items.popleft()
            if items:
                heapq.heappush(heads, (tag(items[0]), i, k))
