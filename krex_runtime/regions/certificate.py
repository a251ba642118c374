"""The exclusivity certificate of a region: at its release, a verdict on
whether the holder really had its GPU alone, with the reasons.

Witnesses, each read at the grant and at the release:

- **gate**: the interception counters of every other tenant's processes
  (krex_gate.h): a call that passed the gate during the region, or a gate
  that failed open, is a violation where the GPU shows that process's work
  too. The counters are in files the tenants write: a count alone makes the
  region `unknown`, naming the tenant, and one of a tenant frozen for the
  whole hold is not believed (entry/hints.py). So are the claims entry did
  not believe, and those it froze past the quiesce bound (`unknown`).
  Always there under policy krex.
- **processes**: the GPU's own record of the processes that used it
  (NVML's running compute processes, accounting and samples; on a simulated
  GPU the simulated device's process slots, with the work items each
  started, dead and reaped ones included), read at the grant, at the
  release and every `regions.hold_sample_s` between (entry/hold_processes.py): it
  sees every process that used the GPU during the hold, not only those alive
  at its end. A process on the GPU that is not a tenant of this runtime is a
  violation (it is never gated: "foreign"); so is a tenant's process that
  the gate cannot hold (it has no entry there: no interception library);
  on the simulator, so is any process other than the holder's whose work
  items grew during the region, ended or not.
- **clock**: a note, never a witness: the SM clock at the grant and at the
  release, with the flags telemetry/clocks.py puts on them (below the GPU's
  top clock, a power or thermal throttle). They are conditions of the
  measurement, which its reader gets in the region's flags; a clock says
  nothing of who else ran.

Exclusive is not yet faithful: hold_watch.py reads what else can slow the
holder's trials (its measuring thread waiting for a core, other tenants'
contexts torn down or created inside the region, the clock between the grant
and the release), each with its figure.

The verdict: `violated` when the gate or the process list shows another
submitter's work inside the region; else `unknown` when either could not be
read (between them they see every submitter: the gate those it holds back,
the process list the ones it cannot); else `perturbed` when the hold's
evidence says the trials did not run as they would alone; else `verified`.
Reasons are short lines, one per witness and the clock's note (`gate: ...`);
`flags` the hold's findings for the measurement's reader (`cpu:waited-3.1ms`).

NVML's per-process SM utilisation is not a witness: on the H200 (driver
580) a process's samples, one per 200 ms, stay above 0 % for more than 5 s
after its last kernel, decaying slowly (benchmarks/nvml_sample_lag.py). So a
sample cannot say whether a process ran inside a region or before its
grant, and it made drained work look like a violation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from krex_runtime.regions.entry.hints import told
from krex_runtime.regions.entry.hold_processes import HoldSampler, Seen
from krex_runtime.regions.gate.core import Gate
from krex_runtime.regions.gate.kernel import start_time_of
from krex_runtime.regions.hold_watch import Finding, HoldStart, HoldWatch

VERIFIED, PERTURBED, VIOLATED, UNKNOWN = "verified", "perturbed", "violated", "unknown"
# Worse verdicts win where several are combined (a set's GPUs: gpu_sets.py).
RANK = {VERIFIED: 0, PERTURBED: 1, UNKNOWN: 2, VIOLATED: 3}
CACHE_S = 2.0  # how long who a pid is stays known


class GpuProcesses(Protocol):
    """telemetry/gpu_processes.py: who uses a GPU, as the GPU tells."""

    def running(self, gpu: int) -> dict[int, Any] | None: ...  # pid -> GpuProcess (work_items, active)

    # GpuActivity: every process that used it, ended ones too (processes: GpuProcess with alive, start_time)
    def activity(self, gpu: int, since_us: int) -> Any | None: ...

    def contexts(self, gpu: int) -> set[int] | None: ...  # pids with a context there now (None: n/a)


@dataclass(frozen=True)
class Witness:
    """What the certificate compares the release with, read at the grant."""

    gate_calls: dict[int, int]  # other tenants' processes: pid -> calls passed so far
    holder_pids: frozenset[int]  # the holder's requesting process (it may have ended by the release)
    processes: Any | None  # the GPU's activity (GpuActivity), None: n/a
    clock_flags: list[str] | None  # flags of the SM clock at the grant, None: n/a
    granted_mono_ns: int
    hold: HoldStart | None = None  # what hold_watch.py compares the release with
    holder_tid: int = 0  # the measuring thread
    granted_wall_us: int = 0
    seen: dict[int, Seen] | None = None  # who the processes on the GPU at the grant were
    sampler: HoldSampler | None = None  # who came during the hold
    # What entry did not believe of the other tenants' entries (entry/hints.py):
    # claims it ignored, and claims past the quiesce bound, whose tenants it froze undrained.
    lies: tuple[str, ...] = ()
    overdue: tuple[str, ...] = ()
    frozen: frozenset[int] = frozenset()  # tenants frozen from the grant to the release


@dataclass(frozen=True)
class Certificate:
    verdict: str
    reasons: list[str]
    flags: list[str]  # the hold's findings on the measurement (hold_watch.py)


@dataclass
class Certifier:
    gpu: int
    gate: Gate
    processes: GpuProcesses
    tenant_of: Callable[[int], int | None]  # pid -> tenant id of a running command, None: none
    is_tenant: Callable[[int], bool]  # any process of this runtime's tenants (idle context processes too)
    clock_probe: Callable[[int], dict[str, Any]]
    # Processes whose tenant changes while they live (forwarded mode's context
    # servers act for one command after another): asked every time, never cached.
    changes_tenant: Callable[[int], bool] = lambda pid: False
    hold: HoldWatch | None = None  # what else perturbed the hold (None: only exclusivity is certified)
    sample_s: float = 0.0  # regions.hold_sample_s: the GPU's processes read this often during a hold (0: ends only)

    def __post_init__(self) -> None:
        # pid -> (when asked, answer): who a process is does not change while it
        # lives, and asking walks /proc; a grant and a release should not wait on it.
        self._cache: dict[tuple[str, int], tuple[float, Any]] = {}

    def _ask(self, what: str, pid: int) -> Any:
        now = time.monotonic()
        hit = self._cache.get((what, pid))
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        answer = self.tenant_of(pid) if what == "tenant" else self.is_tenant(pid)
        if self.changes_tenant(pid):
            return answer
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[(what, pid)] = (now, answer)
        return answer

    def learn(self, pid: int, gated: dict[int, int] | None = None) -> Seen:
        """Who a process on the GPU is, asked while it lives; `gated`: the pids
        with an entry in the gate now, and whose entries file it is in (read
        here when not given). A process the running commands do not name yet
        (its command still starting) is its entries file's tenant."""
        if gated is None:
            gated = self._gated()
        tenant = self._ask("tenant", pid)
        return Seen(pid, start_time_of(pid), tenant if tenant is not None else gated.get(pid),
                    bool(self._ask("is_tenant", pid)), pid in gated or self.changes_tenant(pid))

    def _gated(self) -> dict[int, int]:
        """pid -> tenant id of the believed entries in the gate now."""
        return {e.pid: e.tenant_id for e in self.gate.processes()}

    def ungated(self, holder: int) -> list[Seen]:
        """Processes of other tenants on the GPU now that its gate cannot hold
        (no entry: no interception library): entry freezes their tenants."""
        running = self.processes.running(self.gpu) or {}
        gated = self._gated()
        found = [self.learn(pid, gated) for pid in running if pid != os.getpid() and pid not in gated]
        return [w for w in found if w.is_tenant and not w.gated and w.tenant is not None and w.tenant != holder]

    def start(self, holder: int, holder_pid: int, clock: dict[str, Any], holder_tid: int = 0,
              host_side: list[Any] | None = None, on_new: Callable[[Seen], None] | None = None, *,
              lies: list[str] | None = None, overdue: list[str] | None = None,
              frozen: frozenset[int] = frozenset(), sample: bool = True) -> Witness | None:
        """The witnesses at the grant; None when they cannot be read (the verdict is then unknown).
        `host_side`: the other tenants' processes the entry left inside a host-side call;
        `on_new`: told of each process that comes to the GPU during the hold; `lies`,
        `overdue`: what entry did not believe of the gate's entries; `frozen`: the
        tenants it froze for the whole hold; `sample`: read the GPU's processes
        during the hold too (a region inside a lease need not: the lease is sampled)."""
        try:
            others = self.gate.others(holder)
            calls = {e.pid: e.calls_total for e in others}
            flags = clock.get("flags") if clock.get("sm_clock_mhz") is not None else None
            wall_us = time.time_ns() // 1000
            activity = self.processes.activity(self.gpu, wall_us)
            gated = self._gated()
            seen = {p.pid: self.learn(p.pid, gated) for p in (activity.processes if activity else ()) if p.alive}
            hold = self.hold.start(holder_pid, holder_tid, others, host_side or [], clock.get("sm_clock_mhz")) \
                if self.hold else None
        except Exception:  # never the reason a region is refused
            return None
        sampler = HoldSampler(lambda: self.processes.running(self.gpu), self.learn, self.sample_s, seen, on_new) \
            if self.sample_s > 0 and sample else None
        return Witness(calls, frozenset({holder_pid}), activity, flags, time.monotonic_ns(), hold, holder_tid,
                       wall_us, seen, sampler, tuple(lies or ()), tuple(overdue or ()), frozen)

    def finish(self, w: Witness, holder: int) -> Certificate:
        violations: list[str] = []
        reasons: list[str] = []
        seen = w.sampler.stop() if w.sampler is not None else dict(w.seen or {})
        blamed: set[int] = set()
        processes = self._processes(w, holder, seen, blamed)
        gate = self._gate(w, holder, blamed)
        now = self.clock_probe(self.gpu)
        found: list[Finding] = []
        if self.hold is not None and w.hold is not None:
            found = self.hold.finish(w.hold, min(w.holder_pids), w.holder_tid, now.get("sm_clock_mhz"))
        clock = self._clock(w, now, [f.text for f in found if f.witness == "clock"])
        for name, (ok, text) in (("gate", gate), ("processes", processes), ("clock", clock)):
            reasons.append(f"{name}: {text}")
            if ok is False:
                violations.append(name)
        reasons += [f"{f.witness}: {f.text}" for f in found if f.witness != "clock"]
        flags = [f.flag for f in found if f.flag]
        if violations:
            return Certificate(VIOLATED, _first(reasons, violations), flags)
        if gate[0] is None or processes[0] is None:
            return Certificate(UNKNOWN, _first(reasons, [n for n, ok in (("gate", gate[0]), ("processes", processes[0]))
                                                          if ok is None]), flags)
        perturbed = [f.witness for f in found if f.perturbed]
        if perturbed:
            return Certificate(PERTURBED, _first(reasons, perturbed), flags)
        return Certificate(VERIFIED, reasons, flags)

    # Each witness: (True: clean | False: violated | None: n/a, what it says).

    def _gate(self, w: Witness, holder: int, blamed: set[int]) -> tuple[bool | None, str]:
        """The interception counters, which each tenant's entries file holds and
        its processes can write: a count condemns the region only where the GPU
        shows that process's work too (`blamed` by the process witness); a tenant
        frozen for the whole hold made no call, whatever it wrote; any other
        count makes the region unknown, naming the tenant (entry/hints.py)."""
        bad, unsure, notes = [], list(w.overdue), list(w.lies)
        for e in self.gate.others(holder):
            passed = e.calls_total - w.gate_calls.get(e.pid, 0)
            if passed <= 0:
                continue
            claim = f"tenant {e.tenant_id} (pid {e.pid}) made {passed} GPU call(s) through it"
            if e.pid in blamed:  # a call through a gate gone stale (fail-open) counts here too
                bad.append(claim)
            elif e.tenant_id in w.frozen:
                told(e.tenant_id, e.pid, f"its count says {passed} GPU call(s) passed the gate while it was frozen")
                notes.append(f"{claim} by its own count, while frozen for the whole hold: not believed")
            else:
                told(e.tenant_id, e.pid, f"its count says {passed} GPU call(s) passed the gate, the GPU shows none")
                unsure.append(f"{claim} by its own count, and the GPU shows no work of it: not believed, "
                              "not ruled out")
        if bad:
            return False, "; ".join(bad + unsure + notes)
        if unsure:
            return None, "; ".join(unsure + notes)
        return True, "; ".join(["no other tenant's call passed"] + [f"not believed: {n}" for n in notes])

    def _processes(self, w: Witness, holder: int, seen: dict[int, Seen], blamed: set[int]) -> tuple[bool | None, str]:
        """Every process the GPU says used it during the hold (entry/hold_processes.py):
        ended ones by what the GPU kept of them and who they were when seen.
        The pids it blames go into `blamed`."""
        now = self.processes.activity(self.gpu, w.granted_wall_us)
        if now is None or w.processes is None:
            return None, "n/a"
        lost = _lost_records(w.processes, now)
        before = _by_process(w.processes.processes)
        # Whose entries file each process registered in, ended ones too, and those
        # of tenants already gone (Gate.registered): who an ended process was where
        # it was never seen alive. A tenant writes only its own file (with a uid of its own).
        entries = self.gate.registered()
        bad = []
        counted = False
        for (pid, started), p in sorted(_by_process(now.processes).items()):
            counted = counted or p.work_items is not None
            who = self._who(pid, started, p.alive, seen, entries)
            if pid == os.getpid() or pid in w.holder_pids or (who is not None and who.tenant == holder):
                continue
            grew = None
            if p.work_items is not None:
                was = before.get((pid, started)) or (before.get((pid, 0)) if not started else None)
                grew = p.work_items - (was.work_items if was is not None and was.work_items is not None else 0)
                if grew <= 0 and not p.active:
                    continue  # the GPU says it ran nothing during the region
            elif not p.alive and pid not in seen:
                continue  # a pid NVML recorded, never seen on the GPU during the hold: gone before the grant
            found = _blame(pid, p, who, grew)
            bad += found
            blamed.update([pid] if found else [])
        for pid, who in sorted(seen.items()):  # seen during the hold, the GPU keeps nothing of it now (NVML)
            if not counted and pid not in {p.pid for p in now.processes} and who.tenant != holder \
                    and pid not in w.holder_pids:
                found = _blame(pid, None, who, None)
                bad += found
                blamed.update([pid] if found else [])
        if bad:
            return False, "; ".join(bad)
        if lost:
            return None, (f"{lost} process slot(s) reaped during the region beyond the {now.reaped_kept} the "
                          "simulator keeps: their work is not seen")
        return True, "only the holder ran work" if counted else "no process outside this runtime's tenants"

    def _who(self, pid: int, started: int, alive: bool, seen: dict[int, Seen],
             entries: dict[tuple[int, int], int]) -> Seen | None:
        """Who a process was: as seen during the hold, else asked now if it lives,
        else by the entries file it registered in (None: not known)."""
        who = seen.get(pid)
        if (who is not None and (not started or not who.start_time or who.start_time == started)
                and (who.tenant is not None or not alive)):
            return who if who.tenant is not None or alive else _by_entry(pid, started, entries) or who
        if alive:
            return self.learn(pid)
        return _by_entry(pid, started, entries) or who

    def _clock(self, w: Witness, now: dict[str, Any], within: list[str]) -> tuple[bool | None, str]:
        """Never False: a clock is a condition of the measurement, not evidence of another submitter.
        `now`: the probe's reading at the release; `within`: what the GPU's
        samples between the grant and the release say (hold_watch.py)."""
        if w.clock_flags is None or now.get("sm_clock_mhz") is None:
            return None, "n/a"
        flags = sorted(set(w.clock_flags) | set(now.get("flags") or []))
        hold = "".join(f"; {text}" for text in within)
        if not flags:
            return True, f"{now['sm_clock_mhz']:.0f} MHz, within tolerance{hold}"
        return True, (f"{now['sm_clock_mhz']:.0f} MHz at the release (flags on the measurement, not interference: "
                      f"{', '.join(flags)}){hold}")


def _by_process(processes: Any) -> dict[tuple[int, int], Any]:
    """(pid, start time) -> the GPU's record of it; a slot and a reaped record of
    one process: the one with more work counted."""
    found: dict[tuple[int, int], Any] = {}
    for p in processes:
        key = (p.pid, p.start_time)
        kept = found.get(key)
        if kept is None or (p.work_items or 0) > (kept.work_items or 0) or (p.alive and not kept.alive):
            found[key] = p
    return found


def _by_entry(pid: int, started: int, entries: dict[tuple[int, int], int]) -> Seen | None:
    """An ended process by the gate entry it left (the same pid and start time;
    a GPU that keeps no start time: the pid alone)."""
    tenant = entries.get((pid, started)) if started else next(
        (t for (p, _), t in entries.items() if p == pid), None)
    return Seen(pid, started, tenant, True, True) if tenant is not None else None


def _lost_records(before: Any, now: Any) -> int:
    """Slots the simulator reaped during the hold whose records it no longer keeps."""
    if before.reaped_seq is None or now.reaped_seq is None:
        return 0
    return max(0, int(now.reaped_seq - before.reaped_seq - now.reaped_kept))


def _blame(pid: int, p: Any, who: Seen | None, grew: int | None) -> list[str]:
    """Why a process other than the holder's on the GPU violates the region (none: it does not)."""
    ended = "" if p is not None and p.alive else ", and ended before the release"
    if who is not None and not who.is_tenant:
        ran = f" and ran {grew} item(s) during the region" if grew else ""
        return [f"pid {pid} uses the GPU{ran} and is not a tenant of this runtime{ended}"]
    tenant = f"tenant {who.tenant}" if who is not None and who.tenant is not None else "tenant ?"
    if grew is not None:
        return [f"{tenant} (pid {pid}) ran {max(grew, 0)} item(s) the gate did not hold{ended}"]
    if who is None or not who.gated:
        return [f"{tenant} (pid {pid}) used the GPU with no entry in its gate (no interception library: "
                f"the gate cannot hold it){ended}"]
    return []  # a gated tenant, where the GPU counts no work: the gate witness judges it


def _first(reasons: list[str], witnesses: list[str]) -> list[str]:
    """The reasons of `witnesses` first (what made the verdict), the others after, each in its order."""
    def named(r: str) -> bool:
        return r.split(":", 1)[0] in witnesses
    return [r for r in reasons if named(r)] + [r for r in reasons if not named(r)]


def certify(certifier: Certifier | None, witness: Witness | None, holder: int) -> Certificate:
    """The certificate of a region at its release (unknown where nobody can say)."""
    if certifier is None or witness is None:
        return Certificate(UNKNOWN, ["no witnesses on this node"], [])
    try:
        return certifier.finish(witness, holder)
    except Exception as exc:  # a witness that fails makes the verdict unknown, never the release fail
        return Certificate(UNKNOWN, [f"the certificate failed: {exc!r}"], [])
