"""The console's two feeds: a live runtime and a recorded trace.

Both build the node state with the runtime's one reducer
(`krex_runtime.wire.state.apply.apply`) and post typed messages to the app. Each feed is
one async worker on the app's event loop, so the state it mutates is only
ever read between its awaits and needs no copying or locking. When events
arrive faster than the screen can show them the worker drains everything
queued, folds it into the state, and posts one `StateChanged`; the message
also replaces an older one still waiting in the app's queue (`can_replace`).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from collections.abc import Callable
from typing import Any

from textual.message import Message

from krex_console.event_log import KEEP_EVENTS, EventLog, RegionRecord
from krex_runtime.api import AsyncClient, RequestFailed
from krex_runtime.transport import Subscription
from krex_runtime.transport.reconnect import keep_connected
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.state.model import NodeState
from krex_runtime.wire.trace.jsonl import Trace

__all__ = ["EventLog", "FeedStatus", "FeedStatusChanged", "LiveFeed", "RegionRecord", "ReplayFeed", "StateChanged"]

# The runtime publishes a snapshot every `snapshot_interval_s` (well under a
# second), so this much silence on the PUB socket means the feed is stale.
STALE_AFTER_S = 3.0
HELLO = {"client": "krex-console"}
# At most this many messages are folded before the worker yields to the UI.
FOLD_BATCH = 5000
# Posts come at most this often: what arrives in between is folded into one
# state, so a fast stream costs the UI a bounded number of messages.
POST_EVERY_S = 0.05


class FeedStatus:
    CONNECTING = "connecting"
    LIVE = "live"
    STALE = "stale"
    DISCONNECTED = "disconnected"
    REPLAY = "replay"


class StateChanged(Message):
    """The newest state of a feed. `now` is the clock the views age things by:
    the wall clock live, the replay position in replay."""

    def __init__(self, state: NodeState, log: EventLog, now: float, folded: int,
                 node: str | None = None) -> None:
        super().__init__()
        self.state = state
        self.log = log
        self.now = now
        self.folded = folded
        self.node = node  # the cluster node it is of (None: the feed's one runtime)

    def can_replace(self, message: Message) -> bool:
        # Only the newest state matters; the state object is shared anyway.
        return isinstance(message, StateChanged)


class FeedStatusChanged(Message):
    def __init__(self, status: str, detail: str = "", read_only: bool | None = None) -> None:
        super().__init__()
        self.status = status
        self.detail = detail
        self.read_only = read_only


Post = Callable[[Message], Any]


class LiveFeed:
    """Snapshot + events from a runtime (docs/protocol.md, "Telemetry"):
    subscribe first, then ask for a snapshot, then apply every event with a
    higher sequence number; on a gap, or when the runtime restarted, take a
    new snapshot. Reconnects until the app stops it.

    With `node`, the runtime is that node of a cluster, through its gateway
    (docs/console.md, "Clusters"): the gateway relays the node's messages on
    `node/<name>/event` and `node/<name>/snapshot`, each tagged with
    `"node"`, and answers `snapshot` with `node` with the node's own
    snapshot; the rest is the same."""

    def __init__(self, control: str, telemetry: str, post: Post, stale_after_s: float = STALE_AFTER_S,
                 node: str | None = None) -> None:
        self.control = control
        self.telemetry = telemetry
        self.post = post
        self.stale_after_s = stale_after_s
        self.node = node
        self.topic_prefix = b"node/" + node.encode() + b"/" if node is not None else b""
        self.state = NodeState()
        self.log = EventLog()
        self.status = FeedStatus.CONNECTING
        self.snapshots_taken = 0
        self.posts = 0
        self.events_applied = 0
        self.last_message_mono = time.monotonic()  # when PUB last said anything (STALE shows its age)

    def _set_status(self, status: str, detail: str = "", read_only: bool | None = None) -> None:
        if status != self.status or read_only is not None or detail:
            self.status = status
            self.post(FeedStatusChanged(status, detail, read_only))

    async def run(self) -> None:
        await keep_connected(self._session, lambda exc: self._set_status(FeedStatus.DISCONNECTED, str(exc)),
                             also=(RequestFailed,))

    async def _session(self) -> None:
        # Its queue as deep as the runtime's send queue: a console that falls
        # behind for a moment catches up instead of dropping events (a gap costs
        # a snapshot, and the audit log and region timeline lose what was dropped).
        sub = Subscription(self.telemetry, [self.topic_prefix + protocol.TOPIC_EVENT,
                                            self.topic_prefix + protocol.TOPIC_SNAPSHOT])
        try:
            async with AsyncClient(self.control, timeout=5.0) as client:
                hello = await client.call("hello", HELLO)
                await self._resync(client)
                self._set_status(FeedStatus.LIVE, f"{hello.get('node', '')}", read_only=bool(hello.get("read_only")))
                await self._follow(sub, client)
        finally:
            sub.close()

    async def _resync(self, client: AsyncClient) -> None:
        snap = await client.call("snapshot", {"node": self.node} if self.node is not None else None)
        self._rebase(node_state.from_snapshot(snap["state"]))
        self._post_state(0)

    def _rebase(self, state: NodeState) -> None:
        """Take a snapshot as the new state. The audit log keeps what it has
        (a gap only loses the dropped events) unless the runtime is another one."""
        if (state.pid, state.started_at) != (self.state.pid, self.state.started_at):
            self.log.clear()
        if self.node is not None:
            state.node = self.node  # the name the cluster knows it by (a snapshot names its host)
        self.state = state
        self.snapshots_taken += 1

    async def _follow(self, sub: Subscription, client: AsyncClient) -> None:
        folded = 0  # events applied since the last post
        last_post = time.monotonic()
        while True:
            wait_s = max(0.0, POST_EVERY_S - (time.monotonic() - last_post)) if folded else self.stale_after_s
            if not await sub.wait(wait_s):
                if folded:
                    self._post_state(folded)
                    folded, last_post = 0, time.monotonic()
                    continue
                self._set_status(FeedStatus.STALE, f"no telemetry for {self.stale_after_s:g} s")
                # A runtime that still answers is only quiet on PUB; one that
                # does not is gone: raising ends the session and reconnects.
                await client.call("hello", HELLO, 2.0)
                continue
            if self.status != FeedStatus.LIVE:
                self._set_status(FeedStatus.LIVE)
            batch, resync = 0, False
            while batch < FOLD_BATCH and sub.pending():
                topic, frame = await sub.receive()
                self.last_message_mono = time.monotonic()
                batch += 1
                if self._take(topic, json.loads(frame)):
                    resync = True
                    break
            folded += batch
            if resync:
                await self._resync(client)
                folded, last_post = 0, time.monotonic()
            elif time.monotonic() - last_post >= POST_EVERY_S:
                self._post_state(folded)
                folded, last_post = 0, time.monotonic()
            await asyncio.sleep(0)  # let the UI run between batches

    def _take(self, topic: bytes, body: dict[str, Any]) -> bool:
        """Fold one PUB message into the state; True when a new snapshot must be requested."""
        topic = topic[len(self.topic_prefix):]
        if self.node is not None and body.get("type") != "runtime_started":
            body.pop("node", None)  # the relay's tag: the audit log shows the node's own fields
        if topic == protocol.TOPIC_SNAPSHOT:
            published = body.get("state", {})
            restarted = (published.get("pid"), published.get("started_at")) != (self.state.pid, self.state.started_at)
            # PUB keeps order: every event up to this snapshot's seq came
            # before it, so a snapshot ahead of us means events were dropped.
            # Either way the published snapshot is the new base state.
            if restarted or body.get("seq", 0) > self.state.seq:
                self._rebase(node_state.from_snapshot(published))
            return False
        seq = body.get("seq", 0)
        if body.get("type") == "runtime_started" and body.get("pid") != self.state.pid:
            return True
        if seq <= self.state.seq:
            return False
        if seq != self.state.seq + 1:
            return True
        node_state.apply(self.state, body)
        self.log.add(body)
        self.events_applied += 1
        return False

    def _post_state(self, folded: int) -> None:
        self.posts += 1
        self.post(StateChanged(self.state, self.log, time.time(), folded, node=self.node))


class ReplayFeed:
    """A trace played through the same reducer: play, pause, step, speed, seek.

    Seeking restores the nearest earlier checkpoint (a `state.clone()` kept
    every `checkpoint_every` events while playing forward) and applies the
    events from there, so a seek never re-reads the trace from the start."""

    TICK_S = 0.1

    def __init__(self, trace: Trace, post: Post | None = None, checkpoint_every: int = 500) -> None:
        self.trace = trace
        self.post: Post = post or (lambda message: None)  # the app attaches itself
        self.events = trace.events
        self.times = [e.get("t", 0.0) for e in self.events]
        self.start = self.times[0] if self.times else trace.header.get("started_at", 0.0)
        self.end = self.times[-1] if self.times else self.start
        self.checkpoint_every = checkpoint_every
        # Where each run of the trace begins (a runtime that restarted, or a node
        # that stopped and came back, wrote several).
        self.run_begins = [i for i, e in enumerate(self.events) if e.get("type") == "runtime_started"]
        self.checkpoints: dict[int, NodeState] = {0: NodeState()}
        self.state = NodeState()
        self.log = EventLog()
        self.index = 0  # events[:index] are in the state
        self.clock = self.start
        self.speed = 1.0
        self.paused = False

    async def run(self) -> None:
        self.post(FeedStatusChanged(FeedStatus.REPLAY, self.describe()))
        self._post_state()
        while True:
            await asyncio.sleep(self.TICK_S)
            if not self.paused and self.index < len(self.events):
                self._advance_to(self.clock + self.TICK_S * self.speed)
                self._post_state()
            elif not self.paused:
                self.paused = True
                self.post(FeedStatusChanged(FeedStatus.REPLAY, self.describe()))

    def describe(self) -> str:
        where = f"+{self.clock - self.start:.1f}s/{self.end - self.start:.1f}s"
        return f"{'paused' if self.paused else 'playing'} x{self.speed:g} {where} event {self.index}/{len(self.events)}"

    def _apply_next(self) -> None:
        event = self.events[self.index]
        node_state.apply(self.state, event)
        self.log.add(event)
        self.index += 1
        if self.index % self.checkpoint_every == 0 and self.index not in self.checkpoints:
            self.checkpoints[self.index] = node_state.clone(self.state)

    def _advance_to(self, t: float) -> None:
        while self.index < len(self.events) and self.times[self.index] <= t:
            self._apply_next()
        self.clock = min(max(t, self.start), self.end)

    def run_start_at(self, index: int) -> float | None:
        """The start of the run that events[index] belongs to: the time of the
        last runtime_started before it (None before the first)."""
        before = bisect.bisect_right(self.run_begins, index) - 1
        return self.times[self.run_begins[before]] if before >= 0 else None

    def seek(self, t: float) -> None:
        """Show the state at trace time `t` (events with time <= t applied)."""
        target = bisect.bisect_right(self.times, t)
        if target < self.index or target - self.index > self.checkpoint_every:
            base = max(i for i in self.checkpoints if i <= target)
            self.state = node_state.clone(self.checkpoints[base])
            self.index = base
            first = max(0, base - KEEP_EVENTS)
            self.log.clear(run_start=self.run_start_at(first))
            # The audit log and region timeline show the events before the
            # checkpoint too, as they would have after playing up to here.
            for event in self.events[first:base]:
                self.log.add(event)
        self._advance_to(t)
        self.clock = min(max(t, self.start), self.end)
        self._post_state()
        self.post(FeedStatusChanged(FeedStatus.REPLAY, self.describe()))

    def seek_event(self, index: int) -> None:
        """Show the state after the first `index` events."""
        index = max(0, min(index, len(self.events)))
        self.seek(self.times[index - 1] if index else self.start - 1.0)

    def seek_offset(self, seconds: float) -> None:
        self.seek(self.start + seconds)

    def step(self) -> None:
        """Apply exactly one more event and pause there."""
        self.paused = True
        if self.index < len(self.events):
            self._apply_next()
            self.clock = self.times[self.index - 1]
        self._post_state()
        self.post(FeedStatusChanged(FeedStatus.REPLAY, self.describe()))

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused and self.index >= len(self.events):
            self.seek(self.start)  # play again from the start, like a player
            self.paused = False
        self.post(FeedStatusChanged(FeedStatus.REPLAY, self.describe()))

    def set_speed(self, speed: float) -> None:
        self.speed = min(64.0, max(0.125, speed))
        self.post(FeedStatusChanged(FeedStatus.REPLAY, self.describe()))

    def _post_state(self) -> None:
        self.post(StateChanged(self.state, self.log, self.clock, 0))
