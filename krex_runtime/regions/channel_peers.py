"""The region channel's peers, as the runtime's end sees them (regions/channel.py
serves it; region_wire.py is the protocol): lines bounded both ways, a rate limit per connection, the kernel's word on
who a peer is, and the watch that ends a connection when its requester dies
while another process (a child it forked) still holds the socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from krex_runtime.region_wire import MAX_LINE
from krex_runtime.regions.requests import RegionRefused

log = logging.getLogger("krex.region_channel")

# Clients read each reply before they send again: one that leaves its replies
# unread this long is not a client, and its connection is dropped.
SEND_TIMEOUT_S = 10.0


class Refusal(RegionRefused):
    """Ends a connection: the peer gets `ERROR <code> <reason>`, then the connection closes."""


class RateLimit:
    """A token bucket: `per_s` messages a second, in bursts of up to a second's worth."""

    def __init__(self, per_s: int) -> None:
        self.per_s = per_s
        self._allowance = float(per_s)
        self._at = time.monotonic()
        self.refused = 0  # messages refused since the last one let through

    def allow(self) -> bool:
        now = time.monotonic()
        self._allowance = min(float(self.per_s), self._allowance + (now - self._at) * self.per_s)
        self._at = now
        if self._allowance < 1:
            self.refused += 1
            return False
        self._allowance -= 1
        self.refused = 0
        return True


def watch_requester(conn: Any) -> Callable[[], None]:
    """Close the connection the moment its process dies while someone else
    still holds the socket (a forked child inherits it): its request is then
    released as the requester's death. Returns what stops the watch."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(conn.pid)
    except ProcessLookupError:  # gone already: the HELLO proved it was there, so it died since
        loop.call_soon(_end_if_held_elsewhere, conn)
        return lambda: None
    except OSError as exc:  # out of descriptors: the hold limit still bounds its region
        log.warning("region channel: cannot watch pid %d: %s", conn.pid, exc.strerror or exc)
        return lambda: None

    def died() -> None:
        loop.remove_reader(fd)
        _end_if_held_elsewhere(conn)

    loop.add_reader(fd, died)

    def stop() -> None:
        loop.remove_reader(fd)
        os.close(fd)

    return stop


def _end_if_held_elsewhere(conn: Any) -> None:
    """The requester is dead. Its descriptors closed before the kernel said so,
    so a socket nobody else holds shows its end of input now: then the reader
    ends the connection as a plain disconnect. One still open (no input, no
    end) is held by another process: end it here. Lines still unread go first."""
    if conn.writer.is_closing():
        return
    try:
        with conn.writer.get_extra_info("socket").dup() as sock:
            peeked: bytes | None = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        peeked = None
    except OSError:
        return  # reset or closed: the reader sees it
    if peeked is None:
        conn.ended = f"its requester (pid {conn.pid}) died"
        conn.writer.transport.abort()  # the reader sees the end of input
    elif peeked:
        asyncio.get_running_loop().call_later(0.05, _end_if_held_elsewhere, conn)


async def read_line(reader: asyncio.StreamReader) -> str | None:
    """The next line, without its newline; None at the end of input (a partial
    last line included). A line that is too long or not ASCII text is refused."""
    try:
        raw = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise Refusal("EMSGSIZE", f"line longer than {MAX_LINE} bytes") from None
    if b"\0" in raw:
        raise Refusal("EPROTO", "NUL byte in a line")
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise Refusal("EPROTO", "a line is not ASCII text") from None


async def send(writer: asyncio.StreamWriter, line: str) -> None:
    data = line.encode()
    if len(data) > MAX_LINE:  # a reason naming many tenants: lines are bounded both ways
        data = data[: MAX_LINE - 3] + b"..."
    writer.write(data + b"\n")
    try:
        await asyncio.wait_for(writer.drain(), SEND_TIMEOUT_S)
    except TimeoutError:
        raise ConnectionAbortedError("the peer does not read its replies") from None


async def try_send(writer: asyncio.StreamWriter, line: str) -> None:
    """The last word to a peer that may be gone already."""
    try:
        await send(writer, line)
    except ConnectionError:
        pass


def peer_credentials(writer: asyncio.StreamWriter) -> tuple[int, int]:
    """(pid, uid) of the peer, by the kernel's word; (0, -1) if unknown."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return 0, -1
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid
