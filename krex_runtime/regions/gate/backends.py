"""How the other tenants of a GPU are stopped from submitting and drained.

Both backends first close the preload gate (a tenant that has not initialised
CUDA yet cannot be locked by the driver, so it must meet the gate) and wait
until no other tenant is inside a gated call that may perturb the region
(entry/quiesce.py). Then:
  - `preload` asks each process's drain thread (native library) to synchronise
    its contexts and waits for the acknowledgements;
  - `driver-lock` takes the driver's process checkpoint lock of each other
    process that uses CUDA, from parallel threads, which returns once that
    process's submitted work is done; the locks are dropped after the thaw.
    A `deferred` process (a thread still inside context creation or module
    loading, entry/quiesce.py) is drained the preload way instead: the lock waits
    for the calls in progress, which is what entry must not wait for. The gate
    holds its next call, as it holds every tenant's under `preload`.
"""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from krex_runtime.regions.freezer import is_stopped
from krex_runtime.regions.gate.core import Gate
from krex_runtime.regions.gate.driver_lock import (
    CUDA_ERROR_NOT_INITIALIZED,
    CUDA_ERROR_TIMEOUT,
    CUDA_SUCCESS,
    CheckpointDriver,
)


@dataclass
class DrainReport:
    """What draining found: `stuck` names processes that did not finish in time."""

    outcomes: dict[int, str] = field(default_factory=dict)  # pid -> ok | timed_out | error | no_ack | exited | stopped
    locked: list[int] = field(default_factory=list)

    @property
    def stuck(self) -> dict[int, str]:
        return {pid: r for pid, r in self.outcomes.items() if r not in ("ok", "exited", "stopped")}


class GateBackend:
    name = ""

    def drain(self, gate: Gate, holder: int, timeout_s: float, deferred: AbstractSet[int] = frozenset(),
              skip: frozenset[int] = frozenset(), ignore: frozenset[int] = frozenset()) -> DrainReport:
        """Wait (bounded) until the other tenants' submitted work is done; `deferred`:
        pids with a thread inside a host-side call; `skip`: tenants frozen by another
        GPU's region (gpu_sets.py), drained by it already, or frozen as their claims
        outlived the quiesce bound; `ignore`: pids the GPU knows no context of
        (nothing of theirs is on it: entry/hints.py)."""
        raise NotImplementedError

    def release(self, report: DrainReport) -> list[int]:
        """Undo what drain took (after the thaw); returns pids it had to leave as they are."""
        return []


class PreloadBackend(GateBackend):
    name = "preload"

    def drain(self, gate: Gate, holder: int, timeout_s: float, deferred: AbstractSet[int] = frozenset(),
              skip: frozenset[int] = frozenset(), ignore: frozenset[int] = frozenset()) -> DrainReport:
        return _preload_drain(DrainReport(), gate, holder, timeout_s, None, skip, ignore)


class DriverLockBackend(GateBackend):
    name = "driver-lock"

    def __init__(self, driver: CheckpointDriver) -> None:
        self.driver = driver
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="krex-lock")

    def drain(self, gate: Gate, holder: int, timeout_s: float, deferred: AbstractSet[int] = frozenset(),
              skip: frozenset[int] = frozenset(), ignore: frozenset[int] = frozenset()) -> DrainReport:
        started = time.monotonic()
        report = DrainReport()
        pids = [e.pid for e in gate.others(holder, skip) if e.uses_cuda and e.pid not in deferred
                and e.pid not in ignore and not _note_stopped(report, e.pid)]
        by_library = (self._pool.submit(_preload_drain, report, gate, holder, timeout_s, set(deferred), skip, ignore)
                      if deferred else None)
        results = list(self._pool.map(lambda pid: self.driver.lock(pid, timeout_s), pids))
        if by_library is not None:
            by_library.result()
        for pid, rc in zip(pids, results, strict=True):
            if rc == CUDA_SUCCESS:
                report.locked.append(pid)
                report.outcomes[pid] = "ok"
            elif rc == CUDA_ERROR_NOT_INITIALIZED:
                # The driver holds no CUDA state of it (any more): nothing of it can run. A
                # tenant that ends during the drain gets here; were it to start again, the gate holds it.
                report.outcomes[pid] = "exited"
            elif rc == CUDA_ERROR_TIMEOUT:
                report.outcomes[pid] = "timed_out"
            else:
                report.outcomes[pid] = f"error {rc}"
        # The driver refused the lock for another reason (on the H200, now and then
        # CUDA_ERROR_OPERATING_SYSTEM for a process busy in the driver): the
        # library's drain thread can still drain it, within what is left of the bound.
        refused = {pid for pid, r in report.outcomes.items() if r.startswith("error ")}
        if refused:
            left_s = max(0.001, timeout_s - (time.monotonic() - started))
            errors = {pid: report.outcomes[pid] for pid in refused}
            _preload_drain(report, gate, holder, left_s, refused)
            for pid, first in errors.items():
                if report.outcomes.get(pid) != "ok":
                    report.outcomes[pid] = f"{first}, then {report.outcomes.get(pid, 'no_ack')}"
        return report

    def release(self, report: DrainReport) -> list[int]:
        # Never unlock a stopped process (the driver call hangs). After our thaw
        # only someone else can have stopped it; it stays locked and is reported.
        pids = [pid for pid in report.locked if not is_stopped(pid)]
        left = [pid for pid in report.locked if pid not in pids]
        list(self._pool.map(self.driver.unlock, pids))
        report.locked = []
        return left


def _preload_drain(
    report: DrainReport, gate: Gate, holder: int, timeout_s: float, pids: set[int] | None,
    skip: frozenset[int] = frozenset(), ignore: frozenset[int] = frozenset(),
) -> DrainReport:
    """The library's drain of the other processes (of `pids` only, if given; none of `ignore`)."""
    # A stopped process cannot acknowledge: it has no thread running. Its
    # submitted work still finishes on the device; the freezer holds it.
    requests = [r for r in gate.request_drain(holder, pids, skip, ignore) if not _note_stopped(report, r.pid)]
    for outcome in gate.wait_drained(requests, timeout_s):
        report.outcomes[outcome.pid] = outcome.result
    return report


def _note_stopped(report: DrainReport, pid: int) -> bool:
    if is_stopped(pid):
        report.outcomes[pid] = "stopped"
        return True
    return False
