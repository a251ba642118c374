"""Freezing, while a region is held, the tenants its entry had to leave running.

Region entry does not freeze a tenant with a thread still inside a host-side
call (context creation, module loading: quiesce.py): the freeze would stop
that thread inside the driver, or wait for it. With the gate closed its
threads inside gated calls can only become fewer, so once none is left it is
frozen exactly as entry would have frozen it: none of its threads inside a
gated call. A thread per such region watches the few gate entries concerned
and freezes each tenant as soon as it can; the exit stops the watcher before
it thaws, and thaws what the watcher froze with the rest.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from krex_runtime.regions.freezer import FreezeError, Freezer, Target
from krex_runtime.regions.gate.core import Gate, GateError

log = logging.getLogger("krex.regions")

POLL_S = 0.005

# tenant id -> its tree, and the (index, pid) gate entries of its processes still inside a call
Pending = dict[int, tuple[Target, list[tuple[int, int]]]]


def split_freeze(others: list[Any], left_running: list[Any]) -> tuple[list[Target], list[int], Pending]:
    """The GPU's other tenants (host/tenant_registry.Tenant) split into those entry
    freezes now (their trees, their ids) and those still inside a host-side call
    (gate entries `left_running`), which are frozen once out of it."""
    running: dict[int, list[tuple[int, int]]] = {}
    for e in left_running:
        running.setdefault(e.tenant_id, []).append((e.index, e.pid))
    late = {t.tenant_id: (Target(t.command_id, t.pid, cgroup=t.cgroup), running[t.tenant_id])
            for t in others if t.tenant_id in running}
    now = [t for t in others if t.tenant_id not in running]
    return [Target(t.command_id, t.pid, cgroup=t.cgroup) for t in now], [t.tenant_id for t in now], late


class LateFreeze:
    """Watches `pending` (tenant id -> its tree and the gate entries of its processes
    that were inside a call) and freezes each tenant once none of them is."""

    def __init__(self, gate: Gate, freezer: Freezer, pending: Pending) -> None:
        self.gate, self.freezer = gate, freezer
        self.frozen: list[Target] = []
        self.frozen_tenants: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(dict(pending),), name="krex-late-freeze", daemon=True)
        self._thread.start()

    def _inside(self, tenant_id: int, entries: list[tuple[int, int]]) -> bool:
        for index, pid in entries:
            try:
                e = self.gate.entry(tenant_id, index)
            except GateError:
                return True  # the gate is going away with the runtime: freeze nothing more
            if e.pid == pid and e.alive and e.in_call > 0:
                return True
        return False

    def _run(self, pending: Pending) -> None:
        while pending and not self._stop.wait(POLL_S):
            for tenant_id in [t for t, (_, entries) in pending.items() if not self._inside(t, entries)]:
                target, _ = pending.pop(tenant_id)
                # Noted before freezing: a freeze that fails halfway is thawed at the exit too.
                self.frozen.append(target)
                self.frozen_tenants.append(tenant_id)
                try:
                    self.freezer.freeze([target])
                except (FreezeError, OSError) as exc:
                    log.warning("tenant %d could not be frozen during the region (the gate holds it): %s",
                                tenant_id, exc)

    def stop(self) -> tuple[list[Target], list[int]]:
        """Stop watching (waits for a freeze in progress); returns what was frozen."""
        self._stop.set()
        self._thread.join()
        return self.frozen, self.frozen_tenants
