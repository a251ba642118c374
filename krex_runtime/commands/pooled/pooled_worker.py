"""One context process as the runtime sees it: its handle, the pooled command
it runs now, and its control channel (one JSON line per message, with the
command's output pipes passed as descriptors). Each line the process sends
is checked (tenant/worker_link.py): signed with its key, in sequence, one of
its messages with every field of its type. The first line that is not ends
the listening: the pool replaces the process (it is misbehaving, or a
command inside it wrote on its socket)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.commands.workers.worker_pool import ChannelWorker
from krex_runtime.host.identities import Identity
from krex_runtime.tenant.worker_link import CONTEXT_MESSAGES, LinkError, Verifier

log = logging.getLogger("krex.pool")


@dataclass(kw_only=True)
class PooledWorker(ChannelWorker):
    tenant_id: int
    cgroup: Path | None
    run: PooledRun | None = None
    retire_after: str = ""  # set by `recycle`: replace once the current command is done
    inbox: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    identity: Identity | None = None  # tenants.uid_range: the uid it (and every command it runs) runs as
    key: bytes = b""  # what its lines are signed with (worker_link)
    expect: set[str] = field(default_factory=lambda: {"imported", "ready", "failed"})  # what it may send next
    misbehaved: str = ""  # why its channel was given up, when it was

    # --- its control channel ------------------------------------------------------

    async def messages(self) -> Any:
        """Each message it sends, checked; ends at EOF. Sets `misbehaved` and
        ends at the first line that is not its own well-formed message."""
        verifier = Verifier(self.key, CONTEXT_MESSAGES)
        try:
            while line := await self.reader.readline():
                if not line.endswith(b"\n"):
                    break  # EOF inside a line
                try:
                    yield verifier.check(line)
                except LinkError as exc:
                    self.misbehaved = str(exc)
                    return
        except ValueError:  # a line over the limit
            self.misbehaved = "a line over the length limit"
        except ConnectionError:
            pass

    async def next_message(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message, or None when the process died or went quiet for `timeout_s`."""
        get = asyncio.create_task(self.inbox.get())
        done, _ = await asyncio.wait({get, self.exited}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        return None

    async def send(self, msg: dict[str, Any], fds: list[int]) -> None:
        data = json.dumps(msg).encode() + b"\n"
        # The descriptors travel with the first bytes; the worker reads the
        # whole line before it acts, so the rest may follow through the stream.
        sent = socket.send_fds(self.sock, [data[:4096]], fds)
        if sent < len(data):
            self.writer.write(data[sent:])
            await self.writer.drain()


class PooledRun:
    """A pooled command while it runs: what the dispatcher holds as `job.process`."""

    def __init__(self, worker: PooledWorker) -> None:
        self.worker = worker
        self.pid: int | None = worker.pid
        self.cancelled = asyncio.Event()
        self.reason = ""
        self.state = "cancelled"
        self.cause = "cancelled"

    def cancel(self, reason: str, state: str = "cancelled", cause: str = "cancelled") -> None:
        if not self.cancelled.is_set():
            self.reason, self.state, self.cause = reason, state, cause
            self.cancelled.set()

