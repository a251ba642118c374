"""The cluster gateway: a Ray driver that speaks the KREX control protocol v1
on its own endpoint, so a `Client` or `krex --cluster` uses a cluster as
it uses one node (CLUSTER-CONTRACT.md; docs/deployment.md, "A cluster").

It keeps the cluster's commands (command_table.py), places each on a node
(router.py), reads every node's agent (nodes.py) and relays their telemetry.
The verbs' handlers are in handlers.py. What it holds because no node could
take it yet is kept in its run dir (held.py), and held again after a restart.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

import ray
import zmq
import zmq.asyncio

from krex_cluster import access, handlers, held, nodes, sockets
from krex_cluster.access import Peer
from krex_cluster.command_table import ClusterCommand, CommandTable
from krex_cluster.config import ClusterConfig, default_run_dir
from krex_cluster.router import Needs, NoPlacement, place
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol import serving, verbs
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError, Request

log = logging.getLogger("krex.cluster")

TOPIC_CLUSTER = b"cluster"
DRAIN_WAIT_S = 0.5
PUMP_FAILURES = 5  # failed calls in a row, its Ray node up, before an agent counts as gone


class Gateway:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        g = config.gateway
        self.run_dir = Path(g.run_dir) if g.run_dir else default_run_dir()
        self.listen = g.listen or f"ipc://{self.run_dir / 'control.sock'}"
        self.telemetry_endpoint = g.telemetry or (
            f"ipc://{Path(self.listen[len('ipc://'):]).parent / 'telemetry.sock'}" if self.listen.startswith("ipc://") else ""
        )
        self.nodes = {name: nodes.NodeState(name, spec) for name, spec in config.nodes.items()}
        self.table = CommandTable(g.keep_finished, g.output_kept_bytes, self._push)
        self.held_file = held.HeldFile(self.run_dir / held.FILE_NAME, self.table.held_entries)
        self.table.on_held = self.held_file.changed
        self.started_at = time.time()
        self.ctx = zmq.asyncio.Context()
        self.control: zmq.asyncio.Socket | None = None
        self.pub: zmq.asyncio.Socket | None = None
        self.authenticator: Any = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._membership_changed = True
        self._joining: dict[str, asyncio.Task[None]] = {}
        self._requests = serving.InFlight(g.max_requests_per_peer, g.max_requests_in_flight, "the gateway")
        self._stopping = False
        self._lock: int | None = None  # gateway.lock's descriptor while it serves the run dir
        # The joins of the first round that found Ray's nodes; None before it.
        # Until they are done no held-again command is placed: a node may run it.
        self._first_joins: list[asyncio.Task[None]] | None = None

    # --- start and stop ---------------------------------------------------------

    def bind(self) -> None:
        self._lock = sockets.claim(self.run_dir)
        self.control, self.pub, self.authenticator = sockets.bind(
            self.ctx, self.config.gateway, self.listen, self.telemetry_endpoint)
        self.restore()

    def restore(self) -> None:
        """Hold again what an earlier gateway of this run dir held (its file),
        under the same ids; known at once to `wait` and `cancel`."""
        restored = [e for e in held.load(self.held_file.path) if self.table.restore(e) is not None]
        if restored:
            log.info("holding again %d commands an earlier gateway held (%s)", len(restored), self.held_file.path)

    async def run(self, bound: bool = False) -> None:
        if not bound:
            self.bind()
        log.info("krex-cluster gateway %s on %s, telemetry %s", self.config.gateway.name, self.listen,
                 self.telemetry_endpoint)
        self._tasks = [asyncio.ensure_future(t) for t in (self._serve(), self._membership(), self._cluster_beat())]
        try:
            await asyncio.gather(*self._tasks)
        except asyncio.CancelledError:
            pass

    async def stop(self, stop_nodes: bool = False) -> None:
        """Stop serving; with `stop_nodes` also stop every agent's runtime and the agents."""
        self._stopping = True
        try:  # what is held now is on disk for the next gateway
            await asyncio.wait_for(self.held_file.flushed(), 30)
        except TimeoutError:
            log.error("held commands file %s: the last write did not end within 30 s", self.held_file.path)
        for task in self._tasks + [n.pump for n in self.nodes.values() if n.pump is not None]:
            task.cancel()
        if stop_nodes:
            agents = [n.agent for n in self.nodes.values() if n.agent is not None]
            try:
                await asyncio.wait_for(asyncio.gather(*(a.stop.remote() for a in agents), return_exceptions=True), 90)
            except TimeoutError:
                log.warning("agents did not stop their runtimes within 90 s")
            for agent in agents:
                nodes.kill_agent(agent)
        for sock in (self.control, self.pub):
            if sock is not None:
                sock.close(linger=0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.ctx.term()
        if self._lock is not None:  # the run dir is free for the next gateway
            os.close(self._lock)
            self._lock = None

    # --- requests ---------------------------------------------------------------

    async def _serve(self) -> None:
        assert self.control is not None
        remote = self.listen.startswith("tcp://")
        while True:
            frames = await self.control.recv_multipart(copy=False)
            if len(frames) < 2:
                continue
            route = tuple(f.bytes for f in frames[:-1])
            peer = Peer(route, None if remote else access.ipc_credentials(frames[-1]), remote)
            busy = self._requests.busy(route)
            if busy:  # bounded work whatever clients send, as on one node
                self.send(peer, serving.busy_reply(frames[-1].bytes, busy))
                continue
            route_to = functools.partial(self._route, peer)
            answering = serving.answer(frames[-1].bytes, self.config.gateway.max_message_bytes, route_to,
                                       functools.partial(self.send, peer), log)
            self._requests.track(route, asyncio.ensure_future(answering))

    async def _route(self, peer: Peer, req: Request) -> Any:
        """Refuse a tenant what it may not ask (access.py); else the verb's handler (handlers.py)."""
        if req.type in verbs.CHANGING or req.type == "logs" or (req.type == "wait" and req.body.attach):
            why = access.refusal(req.type, peer.credentials, peer.remote)
            if why:
                raise ProtocolError(ErrorCode.FORBIDDEN, why)
        return await handlers.HANDLERS[req.type](self, peer, req)

    def send(self, peer: Peer, msg: dict[str, Any]) -> None:
        assert self.control is not None
        try:
            self.control.send_multipart([*peer.route, protocol.encode(msg)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # a client that went away, or does not read
            log.debug("dropping a message to a departed peer: %s", exc)

    def _push(self, cmd: ClusterCommand, kind: str, body: dict[str, Any]) -> None:
        for peer, request_id in cmd.followers:
            self.send(peer, protocol.push(kind, request_id, body))

    # --- placement --------------------------------------------------------------

    def views(self) -> list[Any]:
        return [n.view() for n in self.nodes.values()]

    def needs_of(self, body: dict[str, Any]) -> Needs:
        return Needs(node_labels=dict(body.get("node_labels") or {}), gpu_model=body.get("gpu_model") or "",
                     mode=body.get("mode"), gpu=body.get("gpu"))

    def choose(self, body: dict[str, Any]) -> str:
        """The node for a submission now; NoPlacement when none can take it now."""
        return place(self.needs_of(body), self.views())

    async def send_to(self, cmd: ClusterCommand, name: str) -> dict[str, Any]:
        """Queue `cmd` on node `name`: its agent's reply ({ok, body | error})."""
        node = self.nodes[name]
        cmd.node, cmd.state, cmd.local = name, "queued", ""
        cmd.attempts += 1
        node.outstanding.add(cmd.id)
        try:
            reply = await node.agent.submit.remote(cmd.id, cmd.body, cmd.meta())
        except ray.exceptions.RayTaskError as exc:  # the agent itself failed on it: not a node to try again
            log.error("node %s: the agent failed a submit: %s", name, exc)
            reply = {"ok": False, "error": {"code": ErrorCode.INTERNAL, "reason": f"node {name}'s agent failed: {exc}"}}
        except ray.exceptions.RayError as exc:
            reason = f"node {name}: agent gone: {type(exc).__name__}"
            reply = {"ok": False, "error": {"code": ErrorCode.REFUSED, "reason": reason}, "unavailable": True}
        if reply.get("ok"):
            if not cmd.final:
                cmd.local, cmd.restored = reply["body"]["id"], False
            self.table.unhold(cmd)
            return reply
        node.outstanding.discard(cmd.id)
        cmd.attempts -= 1
        if cmd.node == name and not cmd.final:
            cmd.node, cmd.state = None, "pending"
            if reply.get("unavailable"):  # it waits for a node: kept for a gateway that restarts
                self.table.hold(cmd)
        return reply

    async def place_pending(self) -> None:
        """Place what waits: commands re-placed from a lost node, or held while
        every node that could run them was down."""
        adopting = self._first_joins is None or not all(t.done() for t in self._first_joins)
        for cmd in self.table.pending():
            if cmd.state != "pending" or (cmd.restored and adopting):
                continue
            try:
                name = self.choose(cmd.body)
            except NoPlacement as exc:
                # A node this gateway has not yet seen may be the one an earlier gateway held it for.
                if not exc.ever and not (cmd.restored and any(not n.info for n in self.nodes.values())):
                    self.table.fail(cmd, exc.reason)
                continue
            reply = await self.send_to(cmd, name)
            if not reply.get("ok") and not reply.get("unavailable") and not cmd.final and cmd.state == "pending":
                error = reply.get("error") or {}
                self.table.fail(cmd, f"node {name} refused it: {error.get('reason', 'no reason given')}")

    def lost(self, cmd: ClusterCommand, node: str, reason: str, started: bool) -> None:
        """`cmd` was on `node`, which lost it: queued ones go elsewhere, running
        ones are re-run if retries are left, else reported failed."""
        if cmd.final or cmd.node != node:
            return
        self.nodes[node].outstanding.discard(cmd.id)
        if started and cmd.retries_left <= 0:
            self.table.fail(cmd, f"node {node} was lost while the command ran ({reason})")
            return
        if started:
            cmd.retries_left -= 1
        cmd.node, cmd.state, cmd.local, cmd.started_at = None, "pending", "", None
        cmd.output, cmd.output_bytes = [], 0
        self.table.hold(cmd)

    # --- the nodes --------------------------------------------------------------

    async def _membership(self) -> None:
        interval = self.config.gateway.membership_interval_s
        while True:
            try:
                by_name = await asyncio.to_thread(nodes.ray_nodes_by_name)
            except Exception as exc:
                log.warning("cannot list Ray's nodes: %s", exc)
                by_name = None
            try:
                if by_name is not None:
                    for node in self.nodes.values():
                        await self._check_node(node, by_name.get(node.name))
                    if self._first_joins is None:
                        self._first_joins = list(self._joining.values())
                await self.place_pending()
            except Exception:  # the next round tries again
                log.exception("membership round failed")
            await asyncio.sleep(interval)

    async def _check_node(self, node: nodes.NodeState, ray_node: str | None) -> None:
        if ray_node is None and node.agent is not None:
            self._node_down(node, "raylet gone")
            await self.place_pending()
        if ray_node is None or node.agent is not None or node.name in self._joining:
            return
        # Joining waits for the node's runtime to answer: the others are read meanwhile.
        self._joining[node.name] = asyncio.ensure_future(self._join(node, ray_node))
        self._joining[node.name].add_done_callback(lambda _: self._joining.pop(node.name, None))

    async def _join(self, node: nodes.NodeState, ray_node: str) -> None:
        agent = nodes.agent_on(self.config, node, ray_node, node.spec.log)
        try:
            info = await agent.start.remote(self.config.gateway.agent_start_timeout_s)
            adopted = await agent.adopt.remote()
        except Exception as exc:  # Ray's errors, or an actor that could not be made: tried again next round
            log.warning("node %s: its agent did not start: %s", node.name, exc)
            node.reason = f"agent gone: {type(exc).__name__}"
            nodes.kill_agent(agent)
            return
        node.agent, node.ray_node, node.info = agent, ray_node, info
        self._adopt(node, adopted)
        self._set_alive(node, info)
        node.pump = asyncio.ensure_future(self._pump(node, agent))

    def _adopt(self, node: nodes.NodeState, adopted: dict[str, Any]) -> None:
        """What the node's agent followed for an earlier gateway becomes ours."""
        for rec in adopted.get("commands", []) + adopted.get("finished", []):
            cmd = self.table.adopt(rec["cid"], rec["body"], rec.get("meta") or {})
            if cmd is None:
                continue
            cmd.node, cmd.local = node.name, rec.get("local", "")
            cmd.state = "running" if rec.get("started") else "queued"
            cmd.output = list(rec.get("output") or [])
            if rec.get("result") is not None:
                self.table.finish(cmd, rec["result"])
            else:
                node.outstanding.add(cmd.id)

    def _set_alive(self, node: nodes.NodeState, info: dict[str, Any]) -> None:
        node.info = {**node.info, **{k: v for k, v in info.items() if v or k in ("alive", "reason")}}
        if info["alive"] and (not node.alive or info["epoch"] != node.epoch):
            node.alive, node.reason, node.since, node.epoch = True, "", time.time(), info["epoch"]
            self._membership_changed = True
        elif not info["alive"] and node.alive:
            node.alive, node.reason, node.since = False, info["reason"], time.time()
            self._membership_changed = True
        elif not info["alive"]:
            node.reason = info["reason"]

    def _node_down(self, node: nodes.NodeState, reason: str) -> None:
        """Its agent is unreachable: every command it had is lost."""
        if node.pump is not None:
            node.pump.cancel()
        if node.agent is not None:
            nodes.kill_agent(node.agent)
        node.agent, node.pump, node.status = None, None, None
        if node.alive or node.reason != reason:
            node.alive, node.reason, node.since = False, reason, time.time()
            self._membership_changed = True
        for cmd in self.table.on_node(node.name):
            self.lost(cmd, node.name, reason, started=cmd.state == "running")

    async def _pump(self, node: nodes.NodeState, agent: Any) -> None:
        """Read one agent until it is gone. A call that fails while its Ray
        node is up is tried again a few times (Ray reports an actor briefly
        unreachable under load) before the node counts as lost."""
        failures = 0
        while True:
            try:
                batch = await agent.drain.remote(DRAIN_WAIT_S, node.status_seq)
            except ray.exceptions.RayError as exc:
                failures += 1
                alive = await asyncio.to_thread(nodes.ray_nodes_by_name)
                gone = node.name not in alive
                if gone or isinstance(exc, ray.exceptions.ActorDiedError) or failures >= PUMP_FAILURES:
                    self._node_down(node, "raylet gone" if gone else f"agent gone: {type(exc).__name__}")
                    await self.place_pending()
                    return
                log.warning("node %s: its agent did not answer (%s), asking again", node.name, type(exc).__name__)
                await asyncio.sleep(0.5)
                continue
            failures = 0
            try:
                self._apply(node, batch)
                await self.place_pending()
            except Exception:  # one bad batch must not leave the node unread
                log.exception("node %s: what its agent reported could not be applied", node.name)

    def _apply(self, node: nodes.NodeState, batch: dict[str, Any]) -> None:
        if batch.get("status") is not None:
            node.status, node.status_seq = batch["status"], batch["status_seq"]
        for kind, cid, body in batch["items"]:
            cmd = self.table.get(cid)
            if cmd is None:
                continue
            if kind == "started":
                self.table.started(cmd, node.name)
            elif kind == "output":
                self.table.output(cmd, node.name, body)
            elif kind == "result":
                if cmd.node == node.name:
                    node.outstanding.discard(cid)
                self.table.result_from(cmd, node.name, body)
            elif kind == "lost":
                self.lost(cmd, node.name, body["reason"], body["started"])
        self._set_alive(node, batch["info"])
        if self.pub is not None:
            prefix = b"node/" + node.name.encode() + b"/"
            for topic, frame in batch["telemetry"]:
                self.pub.send_multipart([prefix + topic, frame])

    async def _cluster_beat(self) -> None:
        """The `cluster` topic: every node's row on each change, and every few seconds."""
        last = 0.0
        while True:
            now = time.monotonic()
            if self._membership_changed or now - last >= self.config.gateway.cluster_interval_s:
                self._membership_changed, last = False, now
                rows = [n.row(with_status=False) for n in self.nodes.values()]
                if self.pub is not None:
                    self.pub.send_multipart([TOPIC_CLUSTER, protocol.encode(
                        {"type": "cluster_nodes", "time": time.time(), "body": {"nodes": rows}})])
            await asyncio.sleep(0.1)
