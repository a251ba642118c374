"""The cluster's feeds: the Nodes view's, live from a gateway or replayed from a
cluster trace; and, in replay, the drilled-in node's state.

Live (`ClusterFeed`): the gateway (docs/console.md, "Clusters") answers
`status` with a row per node (name, alive, reason, labels, GPUs, and the
node's own status body) and publishes `cluster` messages whenever a node
joins, dies or comes back. The feed asks for `status` once a second (one
request out at a time, so a slow gateway costs one request, never a pile)
and applies each `cluster` message as it comes, so a death shows at once;
it posts at most one `NodesChanged` every 0.2 s. A node's own views are fed
by a `LiveFeed` with that node (krex_console/feed.py), which the app starts
on drill-in.

Replay (`ClusterReplayFeed`): one `ReplayFeed` per node trace, all moved to
the same clock, so every node's state is its reducer's at that moment; a
step applies the next event of the merged history.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from textual.message import Message

from krex_console.cluster import node_summary
from krex_console.cluster.node_summary import NodeSummary
from krex_console.feed import HELLO, FeedStatus, Post, ReplayFeed, StateChanged
from krex_runtime.api import AsyncClient, RequestFailed
from krex_runtime.transport import Subscription
from krex_runtime.transport.reconnect import keep_connected
from krex_runtime.wire.trace.cluster import ClusterTrace
from krex_runtime.wire.trace.jsonl import Trace

TOPIC_CLUSTER = b"cluster"
STATUS_EVERY_S = 1.0
POST_EVERY_S = 0.2
# A node trace silent this long before the replay clock (and without a
# runtime_stopped) reads as a node gone: its runtime published telemetry
# every few tenths of a second while it was up.
SILENT_AFTER_S = 3.0


class NodesChanged(Message):
    """The cluster's nodes as they are now, and the feed's own status."""

    def __init__(self, nodes: list[NodeSummary], now: float, status: str, detail: str = "",
                 read_only: bool = False) -> None:
        super().__init__()
        self.nodes = nodes
        self.now = now
        self.status = status
        self.detail = detail
        self.read_only = read_only

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, NodesChanged)


class ClusterFeed:
    """The gateway's nodes: `status` polled, `cluster` messages followed."""

    def __init__(self, control: str, post: Post, telemetry: str | None = None) -> None:
        self.control = control
        self.telemetry = telemetry  # None: the one the gateway's hello names
        self.post = post
        self.rows: dict[str, dict[str, Any]] = {}  # name -> the newest row (with "status" when known)
        self.commands: list[dict[str, Any]] = []  # the gateway's queued and running commands, by cluster id
        self.status = FeedStatus.CONNECTING
        self.detail = ""
        self.read_only = False
        self.hello: dict[str, Any] = {}
        self.polls = 0
        self.last_message_mono = time.monotonic()

    async def run(self) -> None:
        await keep_connected(self._session, self._lost, also=(RequestFailed, ValueError))

    def _lost(self, exc: Exception) -> None:
        self.status, self.detail = FeedStatus.DISCONNECTED, str(exc)
        self._post()

    async def _session(self) -> None:
        async with AsyncClient(self.control, timeout=5.0) as client:
            hello = await client.call("hello", HELLO)
            if not hello.get("cluster"):
                raise ValueError(f"{self.control} is a node's runtime, not a cluster gateway: use --connect")
            self.hello = hello
            self.read_only = bool(hello.get("read_only"))
            telemetry = self.telemetry or hello.get("telemetry")
            if not telemetry:
                raise ValueError("the gateway's hello names no telemetry endpoint: give --telemetry")
            self.telemetry = telemetry
            sub = Subscription(telemetry, [TOPIC_CLUSTER])
            try:
                await self._poll_status(client)
                self.status, self.detail = FeedStatus.LIVE, ""
                self._post()
                await self._follow(sub, client)
            finally:
                sub.close()

    async def _poll_status(self, client: AsyncClient) -> None:
        reply = await client.call("status")
        rows = (reply.get("cluster") or {}).get("nodes") if isinstance(reply, dict) else None
        if not isinstance(rows, list):
            raise ValueError("the gateway's status has no cluster.nodes")
        self.rows = {str(r.get("name")): r for r in rows if isinstance(r, dict)}
        self.commands = [c for c in reply.get("commands") or () if isinstance(c, dict)]
        self.polls += 1

    def cluster_id(self, node: str, local: str) -> str | None:
        """The gateway's id of the command its node calls `local`, when its
        status says (a row's `local` or `node_command_id`); None otherwise."""
        for row in self.commands:
            if row.get("node") == node and local in (row.get("local"), row.get("node_command_id")):
                return str(row.get("id"))
        return None

    def _take_cluster(self, message: dict[str, Any]) -> None:
        """Liveness between status replies: a node that died loses its status
        body (it is stale); one that joined or came back waits for the next."""
        rows = (message.get("body") or {}).get("nodes")
        if message.get("type") != "cluster_nodes" or not isinstance(rows, list):
            return
        fresh: dict[str, dict[str, Any]] = {}
        for row in rows:
            if not isinstance(row, dict):
                continue
            name = str(row.get("name"))
            known = self.rows.get(name, {})
            keep = known.get("status") if row.get("alive") and known.get("alive") else None
            fresh[name] = {**row, "status": keep}
        self.rows = fresh

    async def _follow(self, sub: Subscription, client: AsyncClient) -> None:
        next_poll = time.monotonic() + STATUS_EVERY_S
        poll: asyncio.Task[None] | None = None
        last_post = 0.0
        dirty = False
        try:
            while True:
                if await sub.wait(POST_EVERY_S):
                    while sub.pending():  # drain: only the newest matters
                        _, frame = await sub.receive()
                        self.last_message_mono = time.monotonic()
                        self._take_cluster(json.loads(frame))
                    dirty = True
                if poll is not None and poll.done():
                    poll.result()  # a gateway gone raises here: the session ends and reconnects
                    poll, dirty = None, True
                if poll is None and time.monotonic() >= next_poll:
                    poll = asyncio.ensure_future(self._poll_status(client))
                    next_poll = time.monotonic() + STATUS_EVERY_S
                if dirty and time.monotonic() - last_post >= POST_EVERY_S:
                    self._post()
                    dirty, last_post = False, time.monotonic()
        finally:
            if poll is not None:
                poll.cancel()

    def nodes(self) -> list[NodeSummary]:
        return [node_summary.from_status_row(self.rows[name]) for name in sorted(self.rows)]

    def _post(self) -> None:
        self.post(NodesChanged(self.nodes(), time.time(), self.status, self.detail, self.read_only))


class ClusterReplayFeed:
    """A cluster trace played through one ReplayFeed per node, on one clock.

    It answers what the app asks of a ReplayFeed (play, pause, step, speed,
    seek, describe); `focus` names the node whose state it posts as
    `StateChanged` (the drilled-in one), and it posts `NodesChanged` for
    the Nodes view."""

    TICK_S = ReplayFeed.TICK_S

    def __init__(self, cluster: ClusterTrace, post: Post | None = None, checkpoint_every: int = 500) -> None:
        self.cluster = cluster
        self.post: Post = post or (lambda message: None)
        self.feeds = {
            name: ReplayFeed(Trace(trace.header, trace.events, trace.headers), checkpoint_every=checkpoint_every)
            for name, trace in cluster.nodes.items()
        }
        times = [e.get("t", 0.0) for e in cluster.events]
        self.start = min(times) if times else 0.0
        self.end = max(times) if times else self.start
        self.total = len(cluster.events)
        self.clock = self.start
        self.speed = 1.0
        self.paused = False
        self.focus: str | None = None

    @property
    def index(self) -> int:
        return sum(f.index for f in self.feeds.values())

    async def run(self) -> None:
        self._post_all()
        while True:
            await asyncio.sleep(self.TICK_S)
            if not self.paused and self.index < self.total:
                self._advance_to(self.clock + self.TICK_S * self.speed)
                self._post_all()
            elif not self.paused:
                self.paused = True
                self._post_all()

    def describe(self) -> str:
        where = f"+{self.clock - self.start:.1f}s/{self.end - self.start:.1f}s"
        return f"{'paused' if self.paused else 'playing'} x{self.speed:g} {where} event {self.index}/{self.total}"

    def _advance_to(self, t: float) -> None:
        for feed in self.feeds.values():
            feed._advance_to(t)
        self.clock = min(max(t, self.start), self.end)

    def seek(self, t: float) -> None:
        for feed in self.feeds.values():
            feed.seek(t)
        self.clock = min(max(t, self.start), self.end)
        self._post_all()

    def seek_offset(self, seconds: float) -> None:
        self.seek(self.start + seconds)

    def step(self) -> None:
        """Apply the merged history's next event (the earliest any node has left) and pause."""
        self.paused = True
        waiting = [(f.times[f.index], rank, f) for rank, f in enumerate(self.feeds.values()) if f.index < len(f.events)]
        if waiting:
            t, _, feed = min(waiting, key=lambda w: (w[0], w[1]))
            feed._apply_next()
            self.clock = max(self.clock, t)
        self._post_all()

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused and self.index >= self.total:
            self.seek(self.start)
            self.paused = False
        self._post_all()

    def set_speed(self, speed: float) -> None:
        self.speed = min(64.0, max(0.125, speed))
        self._post_all()

    def set_focus(self, node: str | None) -> None:
        self.focus = node
        self._post_all()

    def node_state(self, name: str) -> tuple[bool, str, float | None]:
        """Whether the node is up at the replay clock, why not, and since when."""
        feed = self.feeds[name]
        if feed.index == 0:
            return False, "not started yet", None
        last = feed.events[feed.index - 1]
        run_started = feed.run_start_at(feed.index - 1)
        if last.get("type") == "runtime_stopped":
            return False, "stopped", last.get("t")
        if feed.index == len(feed.events) and self.clock - last.get("t", 0.0) > SILENT_AFTER_S:
            return False, "trace ends", last.get("t")  # without runtime_stopped: it died, or was cut off
        return True, "", run_started

    def nodes(self) -> list[NodeSummary]:
        out = []
        for name, feed in self.feeds.items():
            alive, reason, since = self.node_state(name)
            host = self.cluster.hosts.get(name, "")
            out.append(node_summary.from_state(name, feed.state, alive, reason, since, {"host": host} if host else {},
                                                gpu_count=len(self.cluster.nodes[name].header.get("gpus") or ())))
        return out

    def _post_all(self) -> None:
        self.post(NodesChanged(self.nodes(), self.clock, FeedStatus.REPLAY, self.describe()))
        if self.focus is not None and self.focus in self.feeds:
            feed = self.feeds[self.focus]
            self.post(StateChanged(feed.state, feed.log, self.clock, 0, node=self.focus))
