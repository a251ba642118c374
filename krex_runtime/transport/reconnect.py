"""Keeping a client connected: run a session against a runtime, and when the
connection is lost (the runtime gone, refused, or never there), say why and
open a new session after a pause, until the caller is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import zmq

from krex_runtime.transport.errors import RuntimeUnavailable

RECONNECT_EVERY_S = 1.0
# What ends a session but not the loop: the transport's own failures.
LOST: tuple[type[Exception], ...] = (RuntimeUnavailable, zmq.ZMQError, OSError)


async def keep_connected(session: Callable[[], Awaitable[None]], on_lost: Callable[[Exception], None], *,
                         also: tuple[type[Exception], ...] = (), every_s: float = RECONNECT_EVERY_S) -> None:
    """Run `session` again and again; each failure of the transport (or of
    the kinds in `also`: what the caller's session raises for a runtime it
    cannot use) goes to `on_lost` before the next try."""
    while True:
        try:
            await session()
        except (*LOST, *also) as exc:
            on_lost(exc)
        await asyncio.sleep(every_s)
