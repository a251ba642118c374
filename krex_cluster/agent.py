"""The node agent: one Ray actor per KREX node, placed on its Ray node with
hard node affinity, fronting that node's krex-runtime.

It starts and supervises the runtime (or attaches to one systemd runs, by
run dir), follows every command the gateway sends it over the runtime's ipc
control socket, and relays the runtime's telemetry. The gateway long-polls
`drain` for what happened since its last call: commands started, output,
results, commands lost with their runtime, telemetry, the runtime's status.

An epoch counts the runtime processes the agent has seen answer: the
commands of one epoch are lost with it (reported `lost`, once), and a new
epoch is the node coming back. The agent keeps what it followed, finished
ones included, so a restarted gateway adopts them (`adopt`).

This module does not import Ray: the gateway wraps the class as an actor.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from krex_cluster import supervisor
from krex_cluster.config import NodeSpec
from krex_cluster.link import LinkLost, RuntimeLink, with_node
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.typed import from_dict

TELEMETRY_KEPT = 20_000  # messages held for the next drain; older ones are dropped (a seq gap says so)
OUTBOX_KEPT = 200_000
FINISHED_KEPT = 5_000  # finished commands kept for a gateway that restarts
OUTPUT_KEPT = 64 << 10  # per command, for adoption
FINISHED_WITH_OUTPUT = 500  # the newest finished keep their output too (the runtime's files keep it all)
BATCH_S = 0.003
UNLISTED_BEFORE_ASKING = 2


@dataclass
class Followed:
    cid: str  # the cluster-wide id
    body: dict[str, Any]
    epoch: int
    request_id: str
    local: str = ""  # the runtime's id
    started: bool = False
    output: list[dict[str, Any]] = field(default_factory=list)
    output_bytes: int = 0
    result: dict[str, Any] | None = None
    unlisted: int = 0  # status replies in a row that did not list it (queued or running)
    meta: dict[str, Any] = field(default_factory=dict)  # the gateway's own (retries left...), for adoption

    def record(self) -> dict[str, Any]:
        return {"cid": self.cid, "body": self.body, "local": self.local, "started": self.started,
                "output": self.output, "result": self.result, "meta": self.meta}


class NodeAgent:
    def __init__(self, name: str, spec: dict[str, Any], log_path: str = "") -> None:
        self.name = name
        self.spec = from_dict(NodeSpec, spec, "spec")
        self.log_path = log_path
        self.run_dir = supervisor.run_dir_of(self.spec)
        self.alive, self.reason, self.since, self.epoch = False, "starting", time.time(), 0
        self.pid: int | None = None
        self.hello: dict[str, Any] = {}
        self.status: dict[str, Any] | None = None
        self.status_seq = 0
        self.commands: dict[str, Followed] = {}
        self.by_request: dict[str, str] = {}
        self.by_local: dict[str, str] = {}
        self.early_started: collections.deque[str] = collections.deque(maxlen=1000)
        self.finished: collections.OrderedDict[str, Followed] = collections.OrderedDict()
        self._with_output: collections.deque[Followed] = collections.deque()
        self.outbox: collections.deque[list[Any]] = collections.deque(maxlen=OUTBOX_KEPT)
        self.telemetry: collections.deque[tuple[bytes, bytes]] = collections.deque(maxlen=TELEMETRY_KEPT)
        self.link: RuntimeLink | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.stopping = False
        self._changed: asyncio.Event | None = None
        self._answering = asyncio.Event()  # set while the runtime is alive: start() returns on it
        self._fetches: set[asyncio.Task[None]] = set()  # results asked for again, held until done
        self._task: asyncio.Task[None] | None = None
        self._prefix = f"{self.name}-{os.getpid():x}"
        self._ids = 0

    # --- what the gateway calls ---------------------------------------------------

    async def start(self, wait_s: float = 60.0) -> dict[str, Any]:
        """Begin supervising (once); returns once the runtime answers, or after `wait_s`."""
        if self._task is None:
            self._changed = asyncio.Event()
            self._task = asyncio.ensure_future(self._supervise())
        try:
            await asyncio.wait_for(self._answering.wait(), wait_s)
        except TimeoutError:
            pass
        return self.info()

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "alive": self.alive, "reason": self.reason, "since": self.since,
                "epoch": self.epoch, "pid": self.pid, "labels": dict(self.hello.get("labels") or {}),
                "gpus": list(self.hello.get("gpus") or []), "policy": self.hello.get("policy", ""),
                "run_dir": str(self.run_dir), "agent_pid": os.getpid()}

    async def drain(self, wait_s: float, status_seen: int) -> dict[str, Any]:
        """What happened since the last drain (waiting up to `wait_s` for
        something); the runtime's status only when newer than `status_seen`."""
        assert self._changed is not None, "start() first"
        if not self.outbox and not self.telemetry and self.status_seq == status_seen:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait_s)
                # What comes with it (a command's events, its output and result)
                # goes in the same reply: one call to the gateway, not several.
                await asyncio.sleep(BATCH_S)
            except TimeoutError:
                pass
        items, telemetry = list(self.outbox), list(self.telemetry)
        self.outbox.clear()
        self.telemetry.clear()
        fresh = self.status_seq != status_seen
        return {"info": self.info(), "items": items, "telemetry": telemetry,
                "status": self.status if fresh else None, "status_seq": self.status_seq}

    async def adopt(self) -> dict[str, Any]:
        """Everything this agent follows and has finished, for a gateway that
        starts (again); what waited in the outbox is in it, so that is emptied."""
        self.outbox.clear()
        return {"info": self.info(), "epoch": self.epoch,
                "commands": [c.record() for c in self.commands.values()],
                "finished": [c.record() for c in self.finished.values()]}

    async def follows(self) -> list[dict[str, Any]]:
        """What it follows now, for a person looking into a node (nothing is taken)."""
        return [{"cid": c.cid, "local": c.local, "started": c.started, "epoch": c.epoch, "unlisted": c.unlisted}
                for c in self.commands.values()]

    async def submit(self, cid: str, body: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        """Queue a command on the runtime and follow it; the reply as {ok, ...}."""
        if not self.alive or self.link is None:
            return _error(protocol.ErrorCode.REFUSED, f"node {self.name} is down: {self.reason}")
        if cid in self.commands:  # sent twice (a retried call): the first stands
            return {"ok": True, "body": {"id": self.commands[cid].local, "state": "queued"}}
        self._ids += 1
        request_id = f"{self._prefix}-{self._ids}"
        cmd = Followed(cid, body, self.epoch, request_id, meta=meta)
        self.commands[cid], self.by_request[request_id] = cmd, cid
        try:
            msg = await self.link.request("submit", {**body, "attach": True}, 10.0, follow=True, request_id=request_id)
        except LinkLost as exc:
            self._forget(cmd)
            return _error(protocol.ErrorCode.REFUSED, f"node {self.name}: {exc}")
        if not msg.get("ok"):
            self._forget(cmd)
            return {"ok": False, "error": msg.get("error") or {}}
        cmd.local = msg["body"]["id"]
        self.by_local[cmd.local] = cid
        if cmd.local in self.early_started and cmd.result is None:
            self._started(cmd)
        return {"ok": True, "body": msg["body"]}

    async def call(self, verb: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Any verb, passed to the runtime as it is: its reply as {ok, body | error}."""
        if not self.alive or self.link is None:
            return _error(protocol.ErrorCode.REFUSED, f"node {self.name} is down: {self.reason}")
        try:
            msg = await self.link.request(verb, body, timeout_s)
        except LinkLost as exc:
            return _error(protocol.ErrorCode.REFUSED, f"node {self.name}: {exc}")
        return {"ok": bool(msg.get("ok")), "body": msg.get("body"), "error": msg.get("error")}

    async def stop(self) -> None:
        """Stop the runtime this agent started (SIGTERM: it cancels and cleans up)."""
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 60)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self.link is not None:
            self.link.close()

    # --- supervising the runtime ---------------------------------------------------

    async def _supervise(self) -> None:
        while not self.stopping:
            if self.spec.runtime == "start":
                self.proc = await supervisor.start(self.spec, self.log_path)
                self.pid = self.proc.pid
            ended = await self._serve_one_epoch()
            self._lose(f"runtime gone: {ended}")
            await asyncio.sleep(self.spec.restart_delay_s)

    async def _serve_one_epoch(self) -> str:
        """Connect, serve while the runtime answers; how it ended."""
        link = RuntimeLink(self.run_dir, self._on_push, self._on_telemetry)
        try:
            hello = await self._first_hello(link)
            if hello is None:
                return supervisor.how_it_ended(self.proc.returncode if self.proc else None)
            self.link, self.hello = link, hello
            self.epoch += 1
            self.alive, self.reason, self.since = True, "", time.time()
            self._answering.set()
            self._notify()
            last_answer = time.monotonic()
            exited = asyncio.ensure_future(self.proc.wait()) if self.proc is not None else None
            while True:
                # A runtime that exits is seen at once, not after a status left unanswered.
                asking = asyncio.ensure_future(link.request("status", {}, self.spec.lost_after_s))
                await asyncio.wait([asking] + ([exited] if exited else []), return_when=asyncio.FIRST_COMPLETED)
                if self.proc is not None and self.proc.returncode is not None:
                    asking.cancel()
                    return supervisor.how_it_ended(self.proc.returncode)
                try:
                    msg = asking.result()
                    if msg.get("ok"):
                        self.status, self.status_seq = msg["body"], self.status_seq + 1
                        self.pid = msg["body"].get("pid", self.pid)
                        last_answer = time.monotonic()
                        self._reconcile(link, msg["body"])
                        self._notify()
                except LinkLost:
                    pass
                if time.monotonic() - last_answer > self.spec.lost_after_s:
                    if self.proc is not None and self.proc.returncode is None:
                        self.proc.kill()  # hung: it is restarted fresh
                        await self.proc.wait()
                    return f"unanswered for {self.spec.lost_after_s:g} s"
                await self._sleep_or_exit(self.spec.poll_interval_s)
        finally:
            link.close()
            self.link = None

    def _reconcile(self, link: RuntimeLink, status: dict[str, Any]) -> None:
        """A followed command the runtime no longer lists, twice, whose result
        never came (a push lost on the way): ask the runtime for its result."""
        listed = {c.get("id") for c in status.get("commands") or ()}
        for cmd in list(self.commands.values()):
            if not cmd.local or cmd.epoch != self.epoch or cmd.local in listed:
                cmd.unlisted = 0
                continue
            cmd.unlisted += 1
            if cmd.unlisted == UNLISTED_BEFORE_ASKING:
                fetch = asyncio.ensure_future(self._fetch_result(link, cmd))
                self._fetches.add(fetch)
                fetch.add_done_callback(self._fetches.discard)

    async def _fetch_result(self, link: RuntimeLink, cmd: Followed) -> None:
        try:
            msg = await link.request("wait", {"id": cmd.local, "attach": False}, 10.0)
        except LinkLost:
            return  # the runtime is gone: the command is lost with it
        if msg.get("ok") and self.commands.get(cmd.cid) is cmd:
            self._on_push(cmd.request_id, {"type": protocol.PUSH_RESULT, "body": msg["body"]})

    async def _first_hello(self, link: RuntimeLink) -> dict[str, Any] | None:
        """The runtime's hello once it answers; None if it ended first (start)
        or stays away for long (attach: tried again after the restart delay)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not self.stopping:
            if self.proc is not None and self.proc.returncode is not None:
                return None
            if (self.run_dir / "control.sock").exists():
                try:
                    msg = await link.request("hello", {"client": f"krex-agent {self.name}"}, 1.0)
                    if msg.get("ok"):
                        return msg["body"]
                except LinkLost:
                    pass
            await asyncio.sleep(0.05)
        return None

    async def _sleep_or_exit(self, seconds: float) -> None:
        if self.proc is None:
            await asyncio.sleep(seconds)
            return
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.ensure_future(self.proc.wait())), seconds)
        except TimeoutError:
            pass

    def _lose(self, reason: str) -> None:
        """The runtime of this epoch is gone: every command it had is lost, once."""
        was_alive = self.alive
        self.alive, self.reason, self.since = False, reason, time.time()
        self._answering.clear()
        # One whose submit has no reply yet is not reported: that submit fails instead.
        for cmd in [c for c in self.commands.values() if c.epoch == self.epoch and c.local]:
            self.outbox.append(["lost", cmd.cid, {"reason": reason, "started": cmd.started}])
            self._forget(cmd)
        if was_alive or self.epoch == 0:
            self._notify()

    # --- what the runtime sends -----------------------------------------------------

    def _on_push(self, request_id: str, msg: dict[str, Any]) -> None:
        cid = self.by_request.get(request_id)
        cmd = self.commands.get(cid) if cid is not None else None
        if cid is None or cmd is None:
            return
        body = dict(msg.get("body") or {})
        if not cmd.local and isinstance(body.get("id"), str):
            # The push came before its submit's reply was taken (a trivial
            # command ends at once): the runtime's id is in it.
            cmd.local = body["id"]
            self.by_local[cmd.local] = cid
        body["id"] = cid
        if msg.get("type") == protocol.PUSH_OUTPUT:
            if not cmd.started:
                self._started(cmd)
            if cmd.output_bytes < OUTPUT_KEPT:
                cmd.output.append(body)
                cmd.output_bytes += len(body.get("data", ""))
            self.outbox.append(["output", cid, body])
        elif msg.get("type") == protocol.PUSH_RESULT:
            body["node"], body["node_command_id"] = self.name, cmd.local
            cmd.result = body
            self.outbox.append(["result", cid, body])
            self._forget(cmd)
            self.finished[cid] = cmd
            while len(self.finished) > FINISHED_KEPT:
                self.finished.popitem(last=False)
            self._with_output.append(cmd)
            while len(self._with_output) > FINISHED_WITH_OUTPUT:
                old = self._with_output.popleft()
                old.output, old.output_bytes = [], 0
        self._notify()

    def _on_telemetry(self, topic: bytes, frame: bytes) -> None:
        if topic == protocol.TOPIC_EVENT and b'"command_started"' in frame:
            self._command_started(frame)
        self.telemetry.append((topic, with_node(frame, self.name)))
        self._notify()

    def _command_started(self, frame: bytes) -> None:
        try:
            event = protocol.load_json(frame)
        except protocol.ProtocolError:
            return
        if event.get("type") != "command_started":
            return
        cid = self.by_local.get(str(event.get("id")))
        if cid is None:  # its submit's reply is not in yet
            self.early_started.append(str(event.get("id")))
        elif cid in self.commands:
            self._started(self.commands[cid])

    def _started(self, cmd: Followed) -> None:
        if not cmd.started:
            cmd.started = True
            self.outbox.append(["started", cmd.cid, {}])

    def _forget(self, cmd: Followed) -> None:
        self.commands.pop(cmd.cid, None)
        self.by_request.pop(cmd.request_id, None)
        self.by_local.pop(cmd.local, None)
        if self.link is not None:
            self.link.unfollow(cmd.request_id)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()


def _error(code: str, reason: str, unavailable: bool = True) -> dict[str, Any]:
    """An error reply of the agent's own; `unavailable`: the node could not
    be asked (a command sent then is placed elsewhere)."""
    return {"ok": False, "error": {"code": code, "reason": reason}, "unavailable": unavailable}
