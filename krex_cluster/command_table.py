"""The gateway's table of cluster commands: one record per cluster-wide id,
where it runs now, its output so far and, once, its result.

Every result is taken once (`finish` refuses a second), and only from the
node and the runtime command the record runs as now: a node that comes back
with a result for a command already re-placed or reported lost is not heard.

The held set is what no node has taken yet (pending, or being sent after it
was pending): the gateway keeps it in a file (held.py), `on_held` says when
it changes, and a restarted gateway `restore`s it.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from krex_runtime.wire.protocol.envelope import FINAL_STATES

# Finished commands whose output a later `wait` still replays.
OUTPUT_FINISHED_KEPT = 1000
# Called with (command, message type, body) for each push to the command's followers.
Push = Callable[["ClusterCommand", str, dict[str, Any]], None]


@dataclass
class ClusterCommand:
    id: str
    body: dict[str, Any]  # the submit body, as the node gets it
    retries_left: int
    submitted_at: float = field(default_factory=time.time)
    attempts: int = 0  # placements that reached a node
    node: str | None = None  # where it is (or is being) queued or run; None while pending
    local: str = ""  # the node runtime's id for it
    state: str = "pending"  # pending (no node yet) | queued | running | a final state
    started_at: float | None = None
    output: list[dict[str, Any]] = field(default_factory=list)
    output_bytes: int = 0
    result: dict[str, Any] | None = None
    followers: list[tuple[Any, str]] = field(default_factory=list)  # (peer, request id)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    restored: bool = False  # held again from an earlier gateway's file: a node may run it already

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def meta(self) -> dict[str, Any]:
        """What the node's agent keeps for a gateway that restarts."""
        return {"retries_left": self.retries_left, "attempts": self.attempts, "submitted_at": self.submitted_at}

    def held_entry(self) -> dict[str, Any]:
        """Its entry in the held-commands file: what a restarted gateway needs
        to hold it again, and to show it in `status` as this one does."""
        return {"id": self.id, "body": self.body, "retries_left": self.retries_left, "attempts": self.attempts,
                "submitted_at": self.submitted_at}

    def status_row(self) -> dict[str, Any]:
        b = self.body
        return {"id": self.id, "argv": list(b.get("argv") or []), "label": b.get("label", ""),
                "state": "queued" if self.state == "pending" else self.state, "gpu": b.get("gpu"),
                "mode": b.get("mode") or "process", "submitted_at": self.submitted_at,
                "started_at": self.started_at, "node": self.node, "attempts": self.attempts,
                "node_command_id": self.local or None}  # the node's views show its own ids


class CommandTable:
    def __init__(self, keep_finished: int, output_kept_bytes: int, push: Push,
                 on_held: Callable[[], None] = lambda: None) -> None:
        self.prefix = f"c{uuid.uuid4().hex[:6]}"
        self._count = 0
        self.live: dict[str, ClusterCommand] = {}
        self.finished: collections.OrderedDict[str, ClusterCommand] = collections.OrderedDict()
        self.keep_finished = keep_finished
        self.output_kept_bytes = output_kept_bytes
        self.push = push
        self.results_dropped = 0  # results heard twice, or from where a command no longer runs
        self._with_output: collections.deque[ClusterCommand] = collections.deque()
        self.held: dict[str, ClusterCommand] = {}  # no node has taken them yet (held.py keeps them on disk)
        self.on_held = on_held

    def hold(self, cmd: ClusterCommand) -> None:
        """No node has it: kept for a gateway that restarts."""
        if cmd.id not in self.held and not cmd.final:
            self.held[cmd.id] = cmd
            self.on_held()

    def unhold(self, cmd: ClusterCommand) -> None:
        """A node took it, or it ended: the nodes' agents keep it from now on."""
        if self.held.pop(cmd.id, None) is not None:
            self.on_held()

    def held_entries(self) -> list[dict[str, Any]]:
        return [c.held_entry() for c in self.held.values()]

    def restore(self, entry: dict[str, Any]) -> ClusterCommand | None:
        """A command an earlier gateway held (its file's entry), held again
        under its id; None if known. Not placed before the nodes' agents were
        asked what they run (`restored`): one of them may run it already."""
        cid = entry["id"]
        if cid in self.live or cid in self.finished:
            return None
        cmd = ClusterCommand(cid, entry["body"], int(entry["retries_left"]), submitted_at=float(entry["submitted_at"]),
                             attempts=int(entry["attempts"]), restored=True)
        self.live[cid] = cmd
        self.held[cid] = cmd  # already in the file: no write
        return cmd

    def new(self, body: dict[str, Any]) -> ClusterCommand:
        self._count += 1
        cmd = ClusterCommand(f"{self.prefix}-{self._count}", body, int(body.get("retries") or 0))
        self.live[cmd.id] = cmd
        return cmd

    def adopt(self, cid: str, body: dict[str, Any], meta: dict[str, Any]) -> ClusterCommand | None:
        """A command a node's agent followed for an earlier gateway; None if known.
        One held again from the file and not placed yet is that one: the node's."""
        held = self.live.get(cid)
        if held is not None and held.restored and held.state == "pending":
            held.body, held.retries_left = body, int(meta.get("retries_left", held.retries_left))
            held.attempts = max(held.attempts, int(meta.get("attempts") or 1))
            held.restored = False
            self.unhold(held)
            return held  # its followers (a `wait` already asked of this gateway) stay
        if cid in self.live or cid in self.finished:
            return None
        cmd = ClusterCommand(cid, body, int(meta.get("retries_left", body.get("retries") or 0)),
                             submitted_at=float(meta.get("submitted_at") or time.time()),
                             attempts=int(meta.get("attempts") or 1))
        self.live[cid] = cmd
        return cmd

    def get(self, cid: str) -> ClusterCommand | None:
        return self.live.get(cid) or self.finished.get(cid)

    def on_node(self, node: str) -> list[ClusterCommand]:
        return [c for c in self.live.values() if c.node == node]

    def pending(self) -> Iterator[ClusterCommand]:
        return (c for c in list(self.live.values()) if c.state == "pending")

    def forget(self, cmd: ClusterCommand) -> None:
        """A submission the node refused: it never existed."""
        self.live.pop(cmd.id, None)
        self.unhold(cmd)

    def started(self, cmd: ClusterCommand, node: str) -> None:
        if not cmd.final and cmd.node == node and cmd.state == "queued":
            cmd.state, cmd.started_at = "running", time.time()

    def output(self, cmd: ClusterCommand, node: str, body: dict[str, Any]) -> None:
        if cmd.final or cmd.node != node:
            return
        if cmd.state == "queued":
            self.started(cmd, node)
        if cmd.output_bytes < self.output_kept_bytes:
            cmd.output.append(body)
            cmd.output_bytes += len(body.get("data", ""))
        self.push(cmd, "output", body)

    def result_from(self, cmd: ClusterCommand, node: str, record: dict[str, Any]) -> None:
        """A node's result for the command: taken once, from where it runs now."""
        if cmd.final or cmd.node != node or (cmd.local and record.get("node_command_id") not in (None, cmd.local)):
            self.results_dropped += 1
            return
        self.finish(cmd, record)

    def finish(self, cmd: ClusterCommand, record: dict[str, Any]) -> None:
        if cmd.final:
            self.results_dropped += 1
            return
        record = {**record, "id": cmd.id, "attempts": cmd.attempts}
        cmd.result, cmd.state = record, record.get("state", "failed")
        if cmd.state not in FINAL_STATES:
            cmd.state = "failed"
        self.push(cmd, "result", record)
        cmd.followers.clear()
        cmd.done.set()
        self.live.pop(cmd.id, None)
        self.unhold(cmd)
        self.finished[cmd.id] = cmd
        while len(self.finished) > self.keep_finished:
            self.finished.popitem(last=False)
        # Output is replayed for the newest finished commands only (the node keeps it all in its files).
        self._with_output.append(cmd)
        while len(self._with_output) > OUTPUT_FINISHED_KEPT:
            old = self._with_output.popleft()
            old.output, old.output_bytes = [], 0

    def fail(self, cmd: ClusterCommand, reason: str, state: str = "failed") -> None:
        self.finish(cmd, failed_record(cmd, reason, state))


def failed_record(cmd: ClusterCommand, reason: str, state: str = "failed") -> dict[str, Any]:
    """The result record of a command no node reported: lost with its node,
    cancelled before it reached one, or that no node could take."""
    now, b = time.time(), cmd.body
    started = cmd.started_at
    return {
        "id": cmd.id, "label": b.get("label", ""), "gpu": None, "state": state, "exit_code": None, "signal": None,
        "reason": reason, "submitted_at": cmd.submitted_at, "started_at": started, "finished_at": now,
        "queue_s": (started or now) - cmd.submitted_at, "run_s": now - started if started else None,
        "total_s": now - cmd.submitted_at, "lease": bool(b.get("lease")), "mode": b.get("mode") or "process",
        "worker": None, "start_s": None, "stdout_path": "", "stderr_path": "", "auto_regions": [],
        "unprotected_timings": 0, "untracked_timings": 0, "share": b.get("share", ""), "output_lost": {},
        "output_error": "",
        "regions": [], "region_count": 0, "node": cmd.node, "node_command_id": cmd.local or None,
    }
