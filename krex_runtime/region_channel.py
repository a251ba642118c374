"""The region channel: a Unix socket on which tenants ask for their GPU alone.

One connection per tenant process, one line per message (docs/native.md,
"Region channel"; the C client is native/src/region_api.c, the Python one
krex_runtime/client.py):

    HELLO 1 <tenant_id> <pid>   ->  OK | ERROR <errno name> <reason>
    ENTER <tid>                 ->  GRANTED <seq> | ERROR ...
    EXIT                        ->  RELEASED <seq> | ERROR ...

The peer is identified by the kernel (SO_PEERCRED), not by what it claims: its
pid must belong to a running command whose tenant id it names. A connection
that closes while waiting or holding withdraws or releases its request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from krex_runtime.region_manager import RegionManager, RegionRefused, Request

log = logging.getLogger("krex.region_channel")

PROTOCOL = 1
MAX_LINE = 256


@dataclass(frozen=True)
class TenantIdentity:
    tenant_id: int
    command_id: str
    gpu: int


Identify = Callable[[int], TenantIdentity | None]


class RegionChannel:
    def __init__(self, path: Path, manager: RegionManager, identify: Identify, hold_limit_s: float) -> None:
        self.path = path
        self.manager = manager
        self._identify = identify
        self._hold_limit_s = hold_limit_s
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._serve_client, path=str(self.path), limit=MAX_LINE * 4)
        os.chmod(self.path, 0o666)  # the run dir's mode guards access

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.path.unlink(missing_ok=True)

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        req: Request | None = None
        try:
            who = await self._hello(reader, writer)
            if who is None:
                return
            while True:
                line = await _read_line(reader)
                if line is None:
                    return
                word, _, arg = line.partition(" ")
                if word == "ENTER":
                    if req is not None:
                        await _send(writer, "ERROR EBUSY this process already holds or awaits its region")
                        continue
                    if not arg.isdigit():
                        await _send(writer, "ERROR EINVAL ENTER needs a thread id")
                        continue
                    req, connected = await self._enter(reader, writer, who, int(arg))
                    if not connected:
                        return
                elif word == "EXIT":
                    if req is None:
                        await _send(writer, "ERROR EINVAL this process holds no region")
                        continue
                    if req.kind == "region":
                        self.manager.gpus[who.gpu].release(req, "released")
                    if req.revoked:
                        await _send(writer, f"ERROR ETIMEDOUT {req.reason}")
                    else:
                        await _send(writer, f"RELEASED {req.seq}")
                    req = None
                else:
                    await _send(writer, f"ERROR EPROTO unknown message {word[:32]!r}")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if req is not None and req.kind == "region":
                self.manager.gpus[req.gpu].withdraw(req, "tenant disconnected")
            writer.close()

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> TenantIdentity | None:
        line = await _read_line(reader)
        if line is None:
            return None
        parts = line.split()
        if len(parts) != 4 or parts[0] != "HELLO":
            await _send(writer, "ERROR EPROTO expected HELLO <version> <tenant_id> <pid>")
            return None
        if parts[1] != str(PROTOCOL):
            await _send(writer, f"ERROR EPROTO region protocol {parts[1]} is not supported (want {PROTOCOL})")
            return None
        pid = _peer_pid(writer)
        who = self._identify(pid) if pid else None
        if who is None or str(who.tenant_id) != parts[2]:
            await _send(writer, "ERROR EPERM this process is not a tenant of this runtime")
            return None
        await _send(writer, "OK")
        return who

    async def _enter(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, who: TenantIdentity, tid: int
    ) -> tuple[Request | None, bool]:
        """The granted request (None if refused), and whether the peer is still there."""
        lease = self.manager.gpus[who.gpu].leased_to(who.tenant_id)
        if lease is not None:  # inside its own lease a region is a no-op
            await _send(writer, f"GRANTED {lease.seq}")
            return lease, True
        req = self.manager.new_request(
            who.gpu, "region", who.tenant_id, who.command_id, _peer_pid(writer), tid, self._hold_limit_s
        )
        # While waiting, the only thing the peer may do is go away.
        gone = asyncio.create_task(reader.read(1))
        try:
            done, _ = await asyncio.wait({req.granted, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            gone.cancel()
            raise
        if req.granted not in done:
            self.manager.gpus[who.gpu].withdraw(req, "tenant disconnected while waiting")
            return None, False
        gone.cancel()
        # The reader allows one waiter: let the cancelled read finish leaving.
        await asyncio.wait({gone})
        try:
            req.granted.result()
        except RegionRefused as exc:
            await _send(writer, f"ERROR {exc.code} {exc.reason}")
            return None, True
        flags = ",".join(req.flags)
        await _send(writer, f"GRANTED {req.seq} {flags}".rstrip())
        return req, True


async def _read_line(reader: asyncio.StreamReader) -> str | None:
    try:
        raw = await reader.readline()
    except (asyncio.LimitOverrunError, ValueError):
        return None
    if not raw:
        return None
    return raw.decode(errors="replace").strip()


async def _send(writer: asyncio.StreamWriter, line: str) -> None:
    writer.write(line.encode() + b"\n")
    await writer.drain()


def _peer_pid(writer: asyncio.StreamWriter) -> int:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return 0
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _, _ = struct.unpack("3i", creds)
    return pid
