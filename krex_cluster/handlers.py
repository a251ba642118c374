"""The gateway's handler of each verb of the control protocol (the table in
krex_runtime/wire/protocol/verbs.py): the same bodies and replies as one node, plus
what CLUSTER-CONTRACT.md adds (`cluster` in hello and status, `node` on the
operator verbs). Refusals of tenants happen before a handler runs (gateway.py).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import ray

from krex_cluster.access import Peer
from krex_cluster.command_table import ClusterCommand, CommandTable
from krex_cluster.config import ClusterConfig
from krex_cluster.held import HeldFile
from krex_cluster.nodes import NodeState
from krex_cluster.router import NoPlacement
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol import history, serving, verbs
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError, Request
from krex_runtime.wire.typed import to_dict


class GatewayContext(Protocol):
    """What the handlers use of the gateway (gateway.py): they are bound
    through it, as the runtime's handlers through their context, so that
    neither module imports the other's."""

    config: ClusterConfig
    nodes: dict[str, NodeState]
    table: CommandTable
    held_file: HeldFile
    started_at: float
    telemetry_endpoint: str

    def send(self, peer: Peer, msg: dict[str, Any]) -> None: ...

    def choose(self, body: dict[str, Any]) -> str: ...

    async def send_to(self, cmd: ClusterCommand, name: str) -> dict[str, Any]: ...


Handler = Callable[[GatewayContext, Peer, Request], Awaitable[Any]]
HANDLERS: dict[str, Handler] = {}
SENT = serving.SENT  # the handler sent its reply itself (pushes follow it)


def handles(verb: verbs.Verb) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[verb.name] = fn
        return fn

    return register


def _gpus(gw: GatewayContext) -> list[dict[str, Any]]:
    """Every GPU of every node that is up, each with its node's name."""
    found = []
    for node in gw.nodes.values():
        if node.alive:
            found += [{**g, "node": node.name} for g in (node.status or {}).get("gpus") or node.info.get("gpus") or []]
    return found


def _policy(gw: GatewayContext) -> str:
    policies = {str(n.info.get("policy")) for n in gw.nodes.values() if n.info.get("policy")}
    return policies.pop() if len(policies) == 1 else "mixed" if policies else "unknown"


@handles(verbs.HELLO)
async def hello(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    return {"protocol": protocol.VERSION, "node": gw.config.gateway.name, "policy": _policy(gw), "read_only": False,
            "telemetry": gw.telemetry_endpoint, "gpus": _gpus(gw), "labels": {}, "cluster": True,
            # A client attached through this gateway sees another answer in its place (api/inbox.py, Liveness).
            "instance": gw.table.prefix}


@handles(verbs.STATUS)
async def status(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    totals: Counter[str] = Counter()
    for node in gw.nodes.values():
        if node.alive and node.status:
            totals.update(node.status.get("totals") or {})
    live = list(gw.table.live.values())
    up = [n for n in gw.nodes.values() if n.alive]
    return {
        "node": gw.config.gateway.name, "policy": _policy(gw), "labels": {}, "pid": os.getpid(),
        "uptime_s": time.time() - gw.started_at, "paused": bool(up) and all((n.status or {}).get("paused") for n in up),
        "stopping": False, "queued": sum(1 for c in live if c.state in ("pending", "queued")),
        "trace": "", "trace_events_lost": sum((n.status or {}).get("trace_events_lost", 0) for n in up),
        "cgroups": None, "regions": None, "totals": dict(totals), "gpus": _gpus(gw),
        "commands": [c.status_row() for c in live],
        "results_dropped": gw.table.results_dropped,
        "cluster": {"nodes": [n.row() for n in gw.nodes.values()]},
    }


@handles(verbs.SUBMIT)
async def submit(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    body = {k: v for k, v in to_dict(req.body).items() if k != "attach"}
    if not 0 <= req.body.retries <= 100:
        raise ProtocolError(ErrorCode.BAD_REQUEST, "body.retries: must be between 0 and 100")
    cmd = gw.table.new(body)
    try:
        name = gw.choose(body)
    except NoPlacement as exc:
        if not exc.ever:
            gw.table.forget(cmd)
            raise ProtocolError(ErrorCode.REFUSED, exc.reason) from None
        name = None  # held until a node that can run it is up
        gw.table.hold(cmd)
    if name is not None:
        reply = await gw.send_to(cmd, name)
        if not reply.get("ok"):
            error = reply.get("error") or {}
            if not reply.get("unavailable"):  # else it waits, and goes to a node that is up
                gw.table.forget(cmd)
                raise ProtocolError(error.get("code", ErrorCode.INTERNAL), error.get("reason", "the node refused it"))
    if cmd.id in gw.table.held:
        bound = gw.config.gateway.max_held
        if len(gw.table.held) > bound:
            gw.table.forget(cmd)
            raise ProtocolError(ErrorCode.QUEUE_FULL, f"the gateway holds {bound} commands no node can take yet "
                                                      "(gateway.max_held): try again when a node is back")
        # Its id is answered once a restarted gateway would know it too (held.py).
        await gw.held_file.flushed()
    return _reply_and_follow(gw, peer, req, cmd, req.body.attach)


def _reply_and_follow(gw: GatewayContext, peer: Peer, req: Request, cmd: Any, attach: bool) -> Any:
    """The reply; with `attach`, then the output so far, the result if it has
    one, and from then on what comes (the order a runtime streams in)."""
    state = "queued" if cmd.state == "pending" else cmd.state
    if not attach:
        return {"id": cmd.id, "state": state}
    gw.send(peer, protocol.reply_ok(req.id, {"id": cmd.id, "state": state}))
    for body in cmd.output:
        gw.send(peer, protocol.push(protocol.PUSH_OUTPUT, req.id, body))
    if cmd.result is not None:
        gw.send(peer, protocol.push(protocol.PUSH_RESULT, req.id, cmd.result))
    else:
        cmd.followers.append((peer, req.id))
    return SENT


def _command(gw: GatewayContext, cid: str) -> Any:
    cmd = gw.table.get(cid)
    if cmd is None:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no command {cid!r} in this cluster")
    return cmd


@handles(verbs.WAIT)
async def wait(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    cmd = _command(gw, req.body.id)
    if req.body.attach:
        return _reply_and_follow(gw, peer, req, cmd, True)
    await cmd.done.wait()
    return cmd.result


@handles(verbs.SHOW)
async def show(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    """A command as the gateway knows it now: its result once it has ended
    (its regions with it), else its row so far; never waits."""
    cmd = _command(gw, req.body.id)
    return {**cmd.status_row(), "share": cmd.body.get("share", ""), **(cmd.result or {}), "id": cmd.id}


@handles(verbs.CANCEL)
async def cancel(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    cmd = _command(gw, req.body.id)
    if cmd.final:
        return {"id": cmd.id, "state": cmd.state}
    if cmd.state == "pending":
        gw.table.fail(cmd, "cancelled before it reached a node", state="cancelled")
        return {"id": cmd.id, "state": cmd.state}
    if not cmd.local:
        raise ProtocolError(ErrorCode.BUSY, f"{cmd.id} is being queued on node {cmd.node}: try again")
    node = gw.nodes[cmd.node]
    reply = await _call_node(gw, node.name, "cancel", {"id": cmd.local}, verbs.CANCEL.wait_s)
    return {"id": cmd.id, "state": cmd.state if cmd.final else reply.get("state", cmd.state)}


async def _call_node(gw: GatewayContext, name: str, verb: str, body: dict[str, Any], timeout_s: float) -> Any:
    """A verb sent to one node's runtime: its reply body, or its error raised as ours."""
    node = gw.nodes.get(name)
    if node is None:
        known = ", ".join(sorted(gw.nodes)) or "none"
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no node {name!r} in this cluster (its nodes: {known})")
    if node.agent is None or not node.alive:
        raise ProtocolError(ErrorCode.REFUSED, f"node {name} is down: {node.reason}")
    try:
        reply = await node.agent.call.remote(verb, body, timeout_s)
    except ray.exceptions.RayError as exc:
        raise ProtocolError(ErrorCode.REFUSED, f"node {name}: agent gone: {type(exc).__name__}") from None
    if not reply.get("ok"):
        error = reply.get("error") or {}
        raise ProtocolError(error.get("code", ErrorCode.INTERNAL), error.get("reason", f"node {name} refused it"))
    return reply.get("body")


def _node_verb(verb: verbs.Verb) -> Handler:
    """An operator verb for one node: it must name the node; the node gets the
    body without it (a runtime knows itself by another name)."""

    async def handle(gw: GatewayContext, peer: Peer, req: Request) -> Any:
        body = to_dict(req.body)
        name = body.pop("node", None)
        if name is None:
            known = ", ".join(sorted(gw.nodes)) or "none"
            raise ProtocolError(ErrorCode.BAD_REQUEST, f"body.node: '{verb.name}' on a cluster names its node ({known})")
        reply = await _call_node(gw, name, verb.name, body, verb.wait_s)
        if isinstance(reply, dict) and verb.name != "snapshot":
            reply = {**reply, "node": name}
        return reply

    return handle


@handles(verbs.LIST)
async def list_commands(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    """The commands the gateway remembers, by their cluster ids, each with its node."""
    try:
        history.states_of(req.body.state)
    except ValueError as exc:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"body.state: {exc}") from None
    rows = []
    for cmd in [*gw.table.finished.values(), *gw.table.live.values()]:
        record = {**cmd.status_row(), "share": cmd.body.get("share", ""), **(cmd.result or {}), "id": cmd.id}
        rows.append(history.row(record, list(cmd.body.get("argv") or [])) | {"node": cmd.node})
    rows = [r for r in rows if history.matches(r, req.body)]
    return {"commands": sorted(rows, key=lambda r: r["submitted_at"] or 0.0)}


@handles(verbs.LOGS)
async def logs(gw: GatewayContext, peer: Peer, req: Request) -> Any:
    """A command's output as the gateway kept it (gateway.output_kept_bytes);
    offsets count characters here."""
    cmd = _command(gw, req.body.id)
    output = {}
    for stream in req.body.streams:
        text = "".join(o.get("data", "") for o in cmd.output if o.get("stream") == stream)
        start = req.body.offsets.get(stream, 0)
        data = text[start:]
        if req.body.tail is not None:
            data = "".join(data.splitlines(keepends=True)[-req.body.tail:]) if req.body.tail > 0 else ""
        output[stream] = {"data": data, "next": len(text), "more": False}
    state = "queued" if cmd.state == "pending" else cmd.state
    return {"id": cmd.id, "state": state, "ended": cmd.final, "output": output, "missing": []}


for _verb in (verbs.SNAPSHOT, verbs.PAUSE, verbs.RESUME, verbs.RECYCLE, verbs.LEASE, verbs.RELEASE):
    handles(_verb)(_node_verb(_verb))

serving.check_handlers(HANDLERS, "the gateway")
