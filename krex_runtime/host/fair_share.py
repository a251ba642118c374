"""Weighted fair share, for the region queue of each GPU and the dispatcher's
admission queue: first across submitters, then across each submitter's own
share keys.

Who submitted a command is the runtime's to say, not the client's: the
control server knows the peer by the kernel's word (an ipc peer's uid,
SO_PEERCRED, named as its user; a tcp client by the name of its CURVE key).
A client names a share key freely (`krex submit --share KEY`), and that key
only divides its submitter's share: the command's effective key is
"<submitter>/<key>", or "<submitter>" without one (`effective_key`). So a
submitter that takes a fresh key for every command gets no more than one
that always uses the same one: at the top level both are one submitter
each.

Weights come from the config (`[dispatcher.share_weights]`, 1 for a name it
does not give): a name without "/" weighs a submitter against the others, a
"<submitter>/<key>" one weighs that key within its submitter's share. Within
a key, order stays FIFO.

Regions (`FairShare`): each submitter's attained service is the region time
its commands held, divided by its weight, and each key's the same within its
submitter. The next region goes to the least-served submitter with a request
queued, and of its keys to the least-served one, its oldest request. A
submitter (a key) that comes back after an idle spell starts level with the
least-served one still waiting (no credit saved up while idle, so it cannot
take the GPU for long stretches), and every request is served once the ones
ahead of it have caught up: with the hold limit bounding each region, no
request waits forever.

Admission (`AdmissionOrder`): start-time fair queueing over commands, at the
two levels. Within a submitter, the j-th queued command of key k has the tag
max(the submitter's virtual time, k's finish tag) + j/weight(k), its
submitter's virtual time being the tag of its command started last and k's
finish tag that of k's command started last plus 1/weight(k); this orders the
submitter's commands. Across submitters the same, with the i-th command of
that order: max(the virtual time, the submitter's finish tag) +
i/weight(submitter). Queued commands are offered to the placement by that
tag, FIFO among equal ones. So a submitter with commands queued gets its turn
within one start of every other submitter's, however many the others queued
before it, and the same holds among one submitter's keys.
"""

from __future__ import annotations

import heapq
import pwd
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

DEFAULT_KEY = "default"  # the runtime's own commands (a canary), and submitters it cannot name


def key_of_user(uid: int | None) -> str:
    """A submitter by its uid: its user name (uid N without one)."""
    if uid is None:
        return DEFAULT_KEY
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def effective_key(submitter: str, key: str) -> str:
    """The share key a command is served under: its submitter's, divided by the
    key the client chose (if any). A "/" in the submitter's name (none of a
    user's, nor of a key file's) cannot be written, so no key a client
    chooses reaches into another submitter's share."""
    submitter = submitter.replace("/", "_") or DEFAULT_KEY
    return f"{submitter}/{key}" if key else submitter


def submitter_of(key: str) -> str:
    """The submitter part of an effective key."""
    return key.split("/", 1)[0]


class Weights:
    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = dict(weights)

    def of_submitter(self, submitter: str) -> float:
        return self.weights.get(submitter, 1.0)

    def of_key(self, key: str) -> float:
        """A key's weight within its submitter's share (its bare default key weighs 1)."""
        return self.weights.get(key, 1.0) if "/" in key else 1.0


class FairShare:
    """Region time by attained service, across submitters, then their keys."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = Weights(weights)
        self.attained: dict[str, float] = {}  # submitter -> region seconds / its weight
        self.attained_key: dict[str, float] = {}  # key -> region seconds / its weight within its submitter
        self.held_s: dict[str, float] = {}  # key -> region seconds, unweighted (for the console)

    def arrive(self, key: str, waiting: Iterable[str]) -> None:
        """A request of `key` joins the queue; `waiting`: the keys queued (or holding) before it."""
        waiting = set(waiting)
        submitter = submitter_of(key)
        by_submitter = {submitter_of(k) for k in waiting}
        _level(self.attained, submitter, by_submitter)
        _level(self.attained_key, key, {k for k in waiting if submitter_of(k) == submitter})

    def take(self, queue: deque[T], key: Callable[[T], str]) -> T:
        """Remove and return the next request: the least-served submitter's
        least-served key's oldest."""
        heads: dict[str, dict[str, int]] = {}  # submitter -> key -> index of its oldest request
        for i, item in enumerate(queue):
            k = key(item)
            heads.setdefault(submitter_of(k), {}).setdefault(k, i)
        submitter = min(heads, key=lambda s: (self.attained.get(s, 0.0), min(heads[s].values())))
        keys = heads[submitter]
        best = min(keys, key=lambda k: (self.attained_key.get(k, 0.0), keys[k]))
        item = queue[keys[best]]
        del queue[keys[best]]
        return item

    def charge(self, key: str, seconds: float) -> None:
        submitter = submitter_of(key)
        self.attained[submitter] = self.attained.get(submitter, 0.0) + seconds / self.weights.of_submitter(submitter)
        self.attained_key[key] = self.attained_key.get(key, 0.0) + seconds / self.weights.of_key(key)
        self.held_s[key] = self.held_s.get(key, 0.0) + seconds


def _level(attained: dict[str, float], name: str, waiting: set[str]) -> None:
    """One back from idle starts level with the least served of the others waiting."""
    others = [attained.get(k, 0.0) for k in waiting if k != name]
    if name not in waiting and others:
        attained[name] = max(attained.get(name, 0.0), min(others))


@dataclass(frozen=True)
class Turn:
    """A queued command's place in one admission order."""

    tag: float  # across submitters
    key_tag: float  # within its submitter


class AdmissionOrder:
    """Start-time fair queueing of the queued commands, across submitters, then their keys."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = Weights(weights)
        self.virtual = 0.0  # the tag of the command started last
        self.finish: dict[str, float] = {}  # submitter -> its last started command's tag + 1/weight
        self.virtual_of: dict[str, float] = {}  # submitter -> the key tag of its command started last
        self.key_finish: dict[str, float] = {}  # key -> its last started command's key tag + 1/weight

    def order(self, queue: Iterable[T], key: Callable[[T], str]) -> Iterator[tuple[T, Turn]]:
        """The queued commands in the order they may start, each with its turn
        (give it to `started`). Lazy: the placement stops early."""
        per_submitter: dict[str, deque[tuple[T, float]]] = {}
        per_key: dict[str, list[T]] = {}
        for item in queue:
            per_key.setdefault(key(item), []).append(item)
        for submitter, keys in _group(per_key).items():
            per_submitter[submitter] = deque(self._within(submitter, keys))
        heads = [(max(self.virtual, self.finish.get(s, 0.0)), i, s) for i, s in enumerate(per_submitter)]
        heapq.heapify(heads)
        step = {s: 1.0 / self.weights.of_submitter(s) for s in per_submitter}
        while heads:
            tag, i, submitter = heapq.heappop(heads)
            items = per_submitter[submitter]
            item, key_tag = items.popleft()
            yield item, Turn(tag, key_tag)
            if items:
                heapq.heappush(heads, (tag + step[submitter], i, submitter))

    def _within(self, submitter: str, keys: dict[str, list[T]]) -> Iterator[tuple[T, float]]:
        """One submitter's queued commands in order, each with its key tag."""
        start = self.virtual_of.get(submitter, 0.0)
        heads = [(max(start, self.key_finish.get(k, 0.0)), i, k) for i, k in enumerate(keys)]
        heapq.heapify(heads)
        nexts = {k: 0 for k in keys}
        while heads:
            tag, i, k = heapq.heappop(heads)
            yield keys[k][nexts[k]], tag
            nexts[k] += 1
            if nexts[k] < len(keys[k]):
                heapq.heappush(heads, (tag + 1.0 / self.weights.of_key(k), i, k))

    def started(self, key: str, turn: Turn) -> None:
        """A command of `key` started at `turn` (from `order`)."""
        submitter = submitter_of(key)
        self.virtual = max(self.virtual, turn.tag)
        finish = turn.tag + 1.0 / self.weights.of_submitter(submitter)
        self.finish[submitter] = max(self.finish.get(submitter, 0.0), finish)
        self.virtual_of[submitter] = max(self.virtual_of.get(submitter, 0.0), turn.key_tag)
        key_finish = turn.key_tag + 1.0 / self.weights.of_key(key)
        self.key_finish[key] = max(self.key_finish.get(key, 0.0), key_finish)


def _group(per_key: dict[str, list[T]]) -> dict[str, dict[str, list[T]]]:
    """Keys by submitter, each in the order it was first queued."""
    grouped: dict[str, dict[str, list[T]]] = {}
    for k, items in per_key.items():
        grouped.setdefault(submitter_of(k), {})[k] = items
    return grouped
