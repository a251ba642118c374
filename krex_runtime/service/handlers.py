"""The runtime's handler of each verb of the control protocol.

The verbs themselves (body, whether they change state, CLI wording) are
defined once in krex_runtime/wire/protocol/verbs.py; this module gives each its
handler, and the server refuses to start unless every verb has exactly one.
Refusals (read-only socket, tenants) happen before a handler runs
(service/server.py); handlers refuse what the node cannot do.
"""

from __future__ import annotations

import asyncio
import codecs
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krex_runtime.host import fair_share
from krex_runtime.node.gpus import Gpu
from krex_runtime.regions.leases import LeaseDesk
from krex_runtime.service.event_log import EventLog
from krex_runtime.service.followers import result_record
from krex_runtime.service.node import Node
from krex_runtime.service.server import Handler, Peer
from krex_runtime.wire.protocol import endpoints, history, verbs
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError, Request
from krex_runtime.wire.state.model import CommandInfo, GpuState


@dataclass
class Context:
    """What handlers read and act on."""

    node: Node
    log: EventLog
    run_dir: Path
    cgroups: str | None  # the command cgroups' folder, for status


Verb = Callable[[Context, Peer, Request], Awaitable[Any]]
# After the kill grace, how long a cancel waits for the killed tree to be reaped.
CANCEL_SETTLE_S = 3.0
HANDLERS: dict[str, Verb] = {}


def handles(verb: verbs.Verb) -> Callable[[Verb], Verb]:
    def register(fn: Verb) -> Verb:
        assert verb.name not in HANDLERS, f"two handlers for {verb.name}"
        HANDLERS[verb.name] = fn
        return fn

    return register


def table(ctx: Context) -> dict[str, Handler]:
    """The handlers bound to this node, keyed by verb name."""
    return {name: _bound(fn, ctx) for name, fn in HANDLERS.items()}


def _bound(fn: Verb, ctx: Context) -> Handler:
    async def handle(peer: Peer, req: Request) -> Any:
        return await fn(ctx, peer, req)

    return handle


@handles(verbs.HELLO)
async def hello(ctx: Context, peer: Peer, req: Request) -> Any:
    return {
        "protocol": protocol.VERSION,
        "node": ctx.log.state.node,
        "policy": ctx.node.config.runtime.policy,
        "read_only": peer.read_only,
        # A tcp client cannot use the run dir's socket: it is told the tcp one ("" when none is served).
        "telemetry": ctx.node.config.runtime.telemetry_tcp if peer.remote else endpoints.telemetry(ctx.run_dir),
        "gpus": [ctx.node.gpu_record(g) for g in ctx.node.gpus],
        "labels": dict(ctx.node.config.runtime.labels),
    }


@handles(verbs.STATUS)
async def status(ctx: Context, peer: Peer, req: Request) -> Any:
    d, state = ctx.node.dispatcher, ctx.log.state
    return {
        "node": state.node,
        "policy": ctx.node.config.runtime.policy,
        "labels": dict(ctx.node.config.runtime.labels),
        "pid": os.getpid(),
        "uptime_s": time.time() - state.started_at,
        "paused": d.paused_node,
        "stopping": d.closed,
        "queued": len(d.queue),
        "trace": str(ctx.log.trace.path),
        "trace_events_lost": ctx.log.trace.lost_total,
        "cgroups": ctx.cgroups,
        "regions": ctx.node.describe_regions(),
        "totals": dict(state.totals),
        "gpus": [_gpu_status(ctx, g, state.gpus[g.index]) for g in ctx.node.gpus],
        "commands": [_command_status(c) for c in state.commands.values() if c.state in ("queued", "running")],
    }


def _command_status(cmd: CommandInfo) -> dict[str, Any]:
    """A queued or running command for `status` (the node state's record, less its regions)."""
    return {k: v for k, v in vars(cmd).items() if k != "regions"} | {"argv": list(cmd.argv)}


def _gpu_status(ctx: Context, gpu: Gpu, state: GpuState) -> dict[str, Any]:
    """One GPU for `status`: its record, and its figures from the node state
    (the reducer's, as every client sees them)."""
    return {
        **ctx.node.gpu_record(gpu),
        "running": sorted(state.running),
        "queued": state.queued,
        "paused": state.paused,
        "leased": gpu.index in ctx.node.dispatcher.leased_gpus,
        "region_holder": state.region_holder,
        "region_kind": state.region_kind,
        "region_since": state.region_since,
        "region_queue": len(state.region_queue),
        "region_gpus": list(state.region_gpus),  # a region over a set of GPUs: the set (one region id on each)
        "frozen": list(state.frozen),
        "regions_granted": state.regions_granted,
        "last_region": dict(state.last_region),
        "verdicts": dict(state.verdicts),
        # GPU processes this runtime did not start (telemetry; None: n/a): they count against every region.
        "foreign_processes": (state.telemetry or {}).get("foreign"),
        # The canary's inflation estimate inside regions (None before its baseline): a cluster's Nodes view shows it.
        "canary": {k: state.canary.get(k) for k in ("inside_p50", "inside_p95", "samples", "flagged")},
        # The estimate from the regions' own records (no load of its own; reducer.py, _estimate).
        "estimate": {k: state.estimate.get(k) for k in ("inside_p50", "inside_p95", "regions", "flagged")},
        "pool": {k: v for k, v in state.pool.items() if k != "workers"},
        "zygote": dict(state.zygote),
    }


@handles(verbs.SNAPSHOT)
async def snapshot(ctx: Context, peer: Peer, req: Request) -> Any:
    _check_node(ctx, req)
    return ctx.log.snapshot_encoded()


def _check_node(ctx: Context, req: Request) -> None:
    """An operator verb names its node only through a cluster gateway, which
    names none when it forwards; a name that is not this node's is `not_found`."""
    node = req.body.node
    if node is not None and node != ctx.log.state.node:
        raise ProtocolError(ErrorCode.NOT_FOUND, f"no node {node!r} here: this runtime is node {ctx.log.state.node!r}")


# A cluster re-runs a command on another node at most this many times.
MAX_RETRIES = 100


def _check_needs(ctx: Context, body: Any) -> Any:
    """A command whose node labels or GPU model this node does not meet is
    refused; with a GPU model and no GPU named, it goes to a GPU of that model."""
    if not 0 <= body.retries <= MAX_RETRIES:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"body.retries: must be between 0 and {MAX_RETRIES}")
    labels = ctx.node.config.runtime.labels
    missing = {k: v for k, v in body.node_labels.items() if labels.get(k) != v}
    if missing:
        have = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
        need = ", ".join(f"{k}={v}" for k, v in sorted(missing.items()))
        raise ProtocolError(ErrorCode.REFUSED, f"this node lacks the labels {need} (its labels: {have})")
    if not body.gpu_model:
        return body
    model = body.gpu_model.lower()
    matching = [g.index for g in ctx.node.gpus if model in g.name.lower()]
    if not matching or (body.gpu is not None and body.gpu not in matching):
        names = ", ".join(sorted({g.name for g in ctx.node.gpus}))
        where = f"GPU {body.gpu}" if body.gpu is not None else "no GPU of this node"
        raise ProtocolError(ErrorCode.REFUSED, f"{where} is a {body.gpu_model!r} (this node has: {names})")
    if body.gpu is None and len(matching) < len(ctx.node.gpus):
        state = ctx.log.state.gpus
        body = dataclasses.replace(body, gpu=min(matching, key=lambda i: len(state[i].running) + state[i].queued))
    return body


@handles(verbs.SUBMIT)
async def submit(ctx: Context, peer: Peer, req: Request) -> Any:
    body = _check_needs(ctx, req.body)
    # Fair share is the submitter's, by the kernel's word (or its CURVE key's);
    # the key the client chose only divides that share.
    body = dataclasses.replace(body, share=fair_share.effective_key(submitter_of(peer), body.share))
    job = ctx.node.dispatcher.submit(body)
    job.submitter_uid = peer.credentials.uid if peer.credentials is not None and not peer.remote else None
    if req.body.attach:
        ctx.node.attachments.attach(peer, req.id, job)
    return {"id": job.id, "state": job.state}


@handles(verbs.WAIT)
async def wait(ctx: Context, peer: Peer, req: Request) -> Any:
    job = ctx.node.dispatcher.find(req.body.id)
    if req.body.attach:
        check_may_stream(ctx, peer, job.id, job.submitter_uid)
        ctx.node.attachments.attach(peer, req.id, job)
        return {"id": job.id, "state": job.state}
    await job.done.wait()
    return result_record(job, ctx.log.state)


def submitter_of(peer: Peer) -> str:
    """Who submits, for fair share: the user of an ipc peer (SO_PEERCRED), the
    key name of a tcp client."""
    if peer.remote:
        return f"key:{peer.key_name}" if peer.key_name else "tcp"
    return fair_share.key_of_user(peer.credentials.uid if peer.credentials is not None else None)


def check_may_stream(ctx: Context, peer: Peer, command_id: str, submitter_uid: int | None) -> None:
    """A command's output streams to operators (the control socket, tcp, the
    runtime's own user) and, on the read-only socket, to the user who
    submitted it; never to a tenant, whose output it may be another's. By
    the kernel's word on the peer (SO_PEERCRED), not by what it says."""
    ctx.node.tenancy.refuse_tenants(peer, "streaming a command's output")
    creds = peer.credentials
    if not peer.read_only or peer.remote or creds is None or creds.uid in (submitter_uid, os.geteuid()):
        return
    raise ProtocolError(
        ErrorCode.FORBIDDEN,
        f"the output of {command_id} streams only to its submitter and operators, not to uid {creds.uid} "
        "(wait without attach gives its result)",
    )


@handles(verbs.SHOW)
async def show(ctx: Context, peer: Peer, req: Request) -> Any:
    """A command as it is now, without waiting (`wait` without attach waits
    for its end): its result record so far, and its command line."""
    job = ctx.node.dispatcher.find(req.body.id)
    return result_record(job, ctx.log.state) | {"argv": list(job.argv)}


@handles(verbs.CANCEL)
async def cancel(ctx: Context, peer: Peer, req: Request) -> Any:
    """Reply once the command has ended (its tree gets the kill grace, then
    SIGKILL), so the state said is the one after the cancel."""
    job = ctx.node.dispatcher.cancel(req.body.id)
    try:
        settle = min(ctx.node.config.dispatcher.kill_grace_s + CANCEL_SETTLE_S, verbs.CANCEL.wait_s * 0.8)
        await asyncio.wait_for(job.done.wait(), settle)
    except TimeoutError:
        pass  # still ending: say so rather than keep the client waiting
    return {"id": job.id, "state": job.state}


@handles(verbs.PAUSE)
async def pause(ctx: Context, peer: Peer, req: Request) -> Any:
    _check_node(ctx, req)
    ctx.node.dispatcher.pause(req.body.gpu)
    return {"paused": req.body.gpu if req.body.gpu is not None else "node"}


@handles(verbs.RESUME)
async def resume(ctx: Context, peer: Peer, req: Request) -> Any:
    _check_node(ctx, req)
    ctx.node.dispatcher.resume(req.body.gpu)
    return {"resumed": req.body.gpu if req.body.gpu is not None else "node"}


@handles(verbs.RECYCLE)
async def recycle(ctx: Context, peer: Peer, req: Request) -> Any:
    _check_node(ctx, req)
    gpu, pool = req.body.gpu, ctx.node.pools.pooled
    ctx.node.dispatcher.check_gpu(gpu)
    if pool is None:
        raise ProtocolError(ErrorCode.REFUSED, "this runtime has no context pool (pool.size_per_gpu = 0)")
    count = pool.recycle(gpu, req.body.now)
    return {"gpu": gpu, "now": req.body.now, "workers": count}


@handles(verbs.LEASE)
async def lease(ctx: Context, peer: Peer, req: Request) -> Any:
    _check_node(ctx, req)
    leases = _leases_or_refuse(ctx)
    ctx.node.dispatcher.check_gpu(req.body.gpu)
    return await leases.lease(req.body.gpu, req.body.ttl_s)


@handles(verbs.RELEASE)
async def release(ctx: Context, peer: Peer, req: Request) -> Any:
    _check_node(ctx, req)
    leases = _leases_or_refuse(ctx)
    ctx.node.dispatcher.check_gpu(req.body.gpu)
    return leases.release(req.body.gpu)


def _leases_or_refuse(ctx: Context) -> LeaseDesk:
    if ctx.node.leases is None:
        raise ProtocolError(
            ErrorCode.REFUSED, f"leases need policy 'krex' (this runtime runs '{ctx.node.config.runtime.policy}')"
        )
    return ctx.node.leases


@handles(verbs.LIST)
async def list_commands(ctx: Context, peer: Peer, req: Request) -> Any:
    """Every command the dispatcher remembers (not the runtime's own canaries),
    oldest first: anyone who may see `status` sees who ran what (not its output)."""
    try:
        history.states_of(req.body.state)
    except ValueError as exc:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"body.state: {exc}") from None
    rows = [history.row(job.result(), job.argv) for job in ctx.node.dispatcher.jobs.values() if not job.internal]
    rows = [r for r in rows if history.matches(r, req.body)]
    return {"commands": sorted(rows, key=lambda r: r["submitted_at"] or 0.0)}


@handles(verbs.LOGS)
async def logs(ctx: Context, peer: Peer, req: Request) -> Any:
    """A command's output from its files: to operators and to its submitter,
    as streaming it is (check_may_stream)."""
    job = ctx.node.dispatcher.find(req.body.id)
    check_may_stream(ctx, peer, job.id, job.submitter_uid)
    check_logs_range(req.body.offsets, req.body.tail)
    ended = job.done.is_set()  # before reading: an ended command's files are whole
    record = job.result()
    output, missing = {}, []
    for stream in req.body.streams:
        if stream not in history.STREAMS:
            raise ProtocolError(ErrorCode.BAD_REQUEST, f"body.streams: no stream {stream!r} (stdout, stderr)")
        path = record.get(f"{stream}_path")
        read = output_file_part(Path(path), req.body.offsets.get(stream, 0), req.body.tail, ended) if path else None
        if read is None:
            missing.append(stream)
        else:
            output[stream] = read
    return {"id": job.id, "state": record["state"], "ended": ended, "output": output, "missing": missing}


MAX_FILE_OFFSET = (1 << 63) - 1  # what a file offset (off_t) can hold


def check_logs_range(offsets: dict[str, int], tail: int | None) -> None:
    """A bad_request for an offset no file has (an offset of 1e20 once reached
    seek() and answered `internal`) or a negative tail."""
    for stream, offset in offsets.items():
        if not 0 <= offset <= MAX_FILE_OFFSET:
            raise ProtocolError(ErrorCode.BAD_REQUEST,
                                f"body.offsets.{stream}: {offset} is not a byte offset (0 to {MAX_FILE_OFFSET})")
    if tail is not None and tail < 0:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"body.tail: {tail} lines; give 0 or more")


def output_file_part(path: Path, offset: int, tail: int | None, final: bool) -> dict[str, Any] | None:
    """From byte `offset` on (whole UTF-8 characters only, the rest next time,
    unless the file is `final`: its command has ended), or the last `tail`
    lines: {"data", "next" (the offset to ask from next), "more" (the file
    holds more already)}. None: there is no file."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if tail is not None:
                start = max(offset, size - history.LOGS_CHUNK_BYTES)
                f.seek(start)
                data = f.read(size - start)
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-tail:]) if tail > 0 else b""
                return {"data": data.decode("utf-8", "replace"), "next": size, "more": False}
            f.seek(offset)
            data = f.read(history.LOGS_CHUNK_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProtocolError(ErrorCode.REFUSED, f"cannot read {path}: {exc.strerror or exc}") from None
    more = offset + len(data) < size
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=final and not more)
    whole = len(data) - len(decoder.getstate()[0])
    return {"data": text, "next": offset + whole, "more": more}
