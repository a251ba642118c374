"""Who follows a command besides the trace: clients attached to its output
(`krex run`, `krex wait`) and the canary keeper. The dispatcher tells them of
each command's output and end; output is not an event (it is not traced)."""

from __future__ import annotations

import asyncio
import codecs
import logging
from dataclasses import dataclass
from typing import Any

from krex_runtime.commands.dispatcher import Dispatcher
from krex_runtime.commands.job import Job
from krex_runtime.node.gpus import Gpu
from krex_runtime.service.server import ControlServer, Peer
from krex_runtime.telemetry.monitor import CANARY_RESTART_S, Telemetry
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.state.model import NodeState

log = logging.getLogger("krex.runtime")


@dataclass
class Attachment:
    peer: Peer
    request_id: str
    decoders: dict[str, codecs.IncrementalDecoder]


def result_record(job: Job, state: NodeState) -> dict[str, Any]:
    """The result record (docs/protocol.md): the job's own figures and its
    regions as the node state folded them from the region events (a command
    an earlier run ended: as that run recorded it, its regions left out)."""
    info = state.commands.get(job.id)
    if info is None:
        return {"regions": [], "region_count": 0} | job.result()
    return job.result() | {"regions": [dict(r) for r in info.regions], "region_count": info.region_count}


class Attachments:
    """Clients that follow a command: its output so far, then the rest as it
    comes, then its result."""

    def __init__(self, server: ControlServer, state: NodeState) -> None:
        self._server = server
        self._state = state
        self._attached: dict[str, list[Attachment]] = {}

    def attach(self, peer: Peer, request_id: str, job: Job) -> None:
        """Replay the output so far, then stream the rest (or the result at once)."""
        att = Attachment(peer, request_id, {s: codecs.getincrementaldecoder("utf-8")("replace") for s in ("stdout", "stderr")})
        for stream, path in (("stdout", job.stdout_path), ("stderr", job.stderr_path)):
            if path is not None and path.exists():
                self._push_output(att, job, stream, path.read_bytes())
        if job.done.is_set():
            self._push(att, protocol.PUSH_RESULT, result_record(job, self._state))
        else:
            self._attached.setdefault(job.id, []).append(att)

    def output(self, job: Job, stream: str, data: bytes) -> None:
        for att in self._attached.get(job.id, []):
            self._push_output(att, job, stream, data)

    def finished(self, job: Job) -> None:
        for att in self._attached.pop(job.id, []):
            self._push(att, protocol.PUSH_RESULT, result_record(job, self._state))

    def _push_output(self, att: Attachment, job: Job, stream: str, data: bytes) -> None:
        text = att.decoders[stream].decode(data)
        if text:
            self._push(att, protocol.PUSH_OUTPUT, {"id": job.id, "stream": stream, "data": text})

    def _push(self, att: Attachment, type_: str, body: object) -> None:
        self._server.send(att.peer, protocol.push(type_, att.request_id, body))


class CanaryKeeper:
    """One canary per GPU (telemetry.canary): started with the service,
    restarted when it ends while the runtime still admits commands."""

    def __init__(self, telemetry: Telemetry, gpus: list[Gpu]) -> None:
        self._telemetry = telemetry
        self._gpus = {g.index: g for g in gpus}
        self.canaries: dict[int, Job] = {}
        self._dispatcher: Dispatcher | None = None

    def start(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        for gpu in self._gpus:
            self._start(gpu)

    def _start(self, gpu: int) -> None:
        dispatcher = self._dispatcher
        if dispatcher is None or dispatcher.closed:
            return
        self.canaries[gpu] = dispatcher.start_internal(self._telemetry.canary_argv(self._gpus[gpu]), gpu, "canary")

    def output(self, job: Job, stream: str, data: bytes) -> None:
        if job.internal and stream == "stdout" and job.gpu is not None:
            self._telemetry.canary_output(job.gpu, job.id, data)

    def finished(self, job: Job) -> None:
        if job.gpu is None or self.canaries.get(job.gpu) is not job:
            return
        if self._dispatcher is not None and not self._dispatcher.closed:
            log.warning("GPU %d canary ended (%s); restarting it in %g s", job.gpu, job.outcome, CANARY_RESTART_S)
            asyncio.get_running_loop().call_later(CANARY_RESTART_S, self._start, job.gpu)


class Followers:
    """The dispatcher's one watcher: tells each follower in turn."""

    def __init__(self, attachments: Attachments, canaries: CanaryKeeper | None) -> None:
        self._followers: list[Attachments | CanaryKeeper] = [attachments] + ([canaries] if canaries else [])

    def output(self, job: Job, stream: str, data: bytes) -> None:
        for f in self._followers:
            f.output(job, stream, data)

    def finished(self, job: Job) -> None:
        for f in self._followers:
            f.finished(job)
