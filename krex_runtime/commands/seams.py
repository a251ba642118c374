"""What the dispatcher is handed besides the pools, each as the narrow part it
calls: who follows commands, the whole-device leases, and the regions'
certificates a command's result waits for. The service gives it the real
ones (service/node.py); nothing here is the dispatcher's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from krex_runtime.commands.job import Job


class CommandWatcher(Protocol):
    """Who follows commands besides the trace: clients attached to their
    output, the canary keeper. Output is not an event (it is not traced)."""

    def output(self, job: Job, stream: str, data: bytes) -> None: ...

    def finished(self, job: Job) -> None: ...


class CommandLeases(Protocol):
    """Whole-device leases for commands submitted with `lease` (policy krex)."""

    async def for_command(self, job: Job) -> Callable[[], None]: ...


class RegionCertificates(Protocol):
    """The regions' certificates a command's result waits for (policy krex)."""

    def uncertified(self, command_id: str) -> list[asyncio.Event]: ...


# How long a command's end waits for its last region's certificate (made in
# the release's worker thread, milliseconds after the holder is answered).
CERTIFICATE_WAIT_S = 10.0
