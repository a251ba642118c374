"""The commands running on each GPU: the slots the dispatcher counts, and the
tenants the region manager gates, drains and freezes when another tenant of
the GPU takes a region, or ends when a region outlives its hold limit.

The dispatcher keeps it (a command is here from its start to its finish); the
region manager only reads it. Both are built around it, so neither needs the
other to exist first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from krex_runtime.host.fair_share import DEFAULT_KEY


@dataclass(frozen=True)
class Tenant:
    """A running command on a GPU, as the region manager sees it."""

    tenant_id: int
    command_id: str
    pid: int
    cgroup: Path | None


class Running(Protocol):
    """What the registry reads of a running command (the dispatcher's Job)."""

    id: str
    gpu: int | None
    tenant_id: int | None
    cgroup: Path | None
    internal: bool  # started by the runtime itself (a canary): takes no slot
    share: str  # its fair-share key (host/fair_share.py)

    @property
    def pid(self) -> int | None: ...

    def cancel(self, reason: str) -> None: ...


class TenantRegistry:
    def __init__(self, gpus: list[int]) -> None:
        self._running: dict[int, dict[str, Running]] = {gpu: {} for gpu in gpus}

    def add(self, gpu: int, command: Running) -> None:
        self._running[gpu][command.id] = command

    def discard(self, gpu: int, command_id: str) -> None:
        self._running[gpu].pop(command_id, None)

    def load(self, gpu: int) -> int:
        """Slots taken on the GPU: its running commands, the runtime's own aside."""
        return sum(1 for c in self._running[gpu].values() if not c.internal)

    def of_gpu(self, gpu: int) -> list[Tenant]:
        """The GPU's running tenants that have a process now."""
        return [
            Tenant(c.tenant_id or 0, c.id, c.pid, c.cgroup)
            for c in list(self._running.get(gpu, {}).values())
            if c.pid is not None
        ]

    def tenant(self, tenant_id: int) -> Tenant | None:
        """The running tenant of that id, on whichever GPU (None: none runs now)."""
        for gpu in list(self._running):
            for t in self.of_gpu(gpu):
                if t.tenant_id == tenant_id:
                    return t
        return None

    def share_of(self, command_id: str) -> str:
        """The fair-share key of a running command (the default for one that is not)."""
        command = self._find(command_id)
        return command.share if command is not None else DEFAULT_KEY

    def end(self, command_id: str, reason: str) -> None:
        """End a running command's whole process tree (a region past its hold limit)."""
        command = self._find(command_id)
        if command is not None:
            command.cancel(reason)

    def _find(self, command_id: str) -> Running | None:
        for running in self._running.values():
            if command_id in running:
                return running[command_id]
        return None
