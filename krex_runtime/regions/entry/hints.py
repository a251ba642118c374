"""What the gate reads from tenants' entries files is a hint, checked against
what the runtime observes itself.

Each tenant writes its process entries (gate/files.py): the library in each
of its processes keeps them, and so can any process of its uid, with any
values. Entry trusted them: a tenant that wrote a LIVE entry for one of its
own processes that had never touched CUDA, with a call "in flight", made
every other tenant's region on that GPU wait the quiesce bound and be
refused, for as long as it ran (issue 47, F3); one that added to its own
`calls_total` during another's hold had that region certified `violated`
(F4). So:

- an entry is believed only for a process that maps one of the runtime's
  interception libraries (/proc/PID/maps): an entry is the library's, written
  from inside the process it names. Beside the gate's own checks (the
  process lives, with the start time the entry says; with a uid per tenant,
  it runs as the entries file's owner). An entry that fails is no process at
  all: not waited for, drained, locked or frozen by it (`EntryCheck`, the
  gate's `vouch`);
- a call "in flight" of a class entry waits for (it submits GPU work) is
  believed only from a process the GPU knows: one with a context there
  (NVML's running compute processes; a simulated GPU's process slots).
  `unfounded` names the claims that fail;
- a claim that outlives the operator's bound (`regions.quiesce_timeout_s`)
  delays the region no further: its tenant is frozen for the hold, its work
  in flight not drained, and the certificate says `unknown`, naming it
  (region_entry.py);
- a count (`calls_total`) condemns a region only where the runtime sees
  the same (the process witness, certificate.py); a tenant frozen for the
  whole hold made no call, whatever it wrote.

Each lie is logged once, with the tenant that told it, and named in the
region's reasons.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("krex.regions")


def maps_any(pid: int, libraries: frozenset[str]) -> bool | None:
    """Whether process `pid` maps one of `libraries` (real paths); None: cannot tell (gone)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            text = f.read()
    except OSError:
        return None
    return any(lib.encode() in text for lib in libraries)


class EntryCheck:
    """The gate's `vouch`: why an entry is not believed (None: it is). The
    answer is kept for the life of the process (pid and start time)."""

    def __init__(self, libraries: list[Path]) -> None:
        self.libraries = frozenset(os.path.realpath(p) for p in libraries)
        self._known: dict[tuple[int, int], str | None] = {}
        self._told: set[tuple[int, int, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, tenant_id: int, pid: int, start_time: int) -> str | None:
        key = (pid, start_time)
        with self._lock:
            if key in self._known:
                return self._known[key]
        mapped = maps_any(pid, self.libraries)
        why = None if mapped is not False else "the process has no interception library loaded"
        with self._lock:
            if len(self._known) > 65536:
                self._known.clear()
            self._known[key] = why
        if why:
            told(tenant_id, pid, why, self._told, self._lock)
        return why


def unfounded(entries: list[Any], contexts: set[int] | None) -> dict[int, str]:
    """Of entries claiming a call in flight that submits GPU work, those whose
    process the GPU knows no context of: pid -> why (`contexts`: the pids with
    a context on the GPU; None: the GPU cannot say, every claim stands)."""
    if contexts is None:
        return {}
    return {e.pid: f"tenant {e.tenant_id}'s entry for pid {e.pid} claims a GPU call in flight, and the GPU "
                   "knows no context of that process"
            for e in entries if e.in_perturbing > 0 and e.pid not in contexts}


_TOLD: set[tuple[int, int, str]] = set()
_TOLD_LOCK = threading.Lock()


def told(tenant_id: int, pid: int, why: str, seen: set[tuple[int, int, str]] | None = None,
         lock: threading.Lock | None = None) -> None:
    """Log a lie once per tenant, process and reason."""
    seen, lock = (seen, lock) if seen is not None and lock is not None else (_TOLD, _TOLD_LOCK)
    with lock:
        if (tenant_id, pid, why) in seen:
            return
        if len(seen) > 65536:
            seen.clear()
        seen.add((tenant_id, pid, why))
    log.warning("tenant %d: its gate entry for pid %d is not believed: %s", tenant_id, pid, why)
