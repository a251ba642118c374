"""What region entry waits for once the gate is closed, and what it lets finish
outside the critical path.

A thread of another tenant may be inside a gated call when the gate closes.
Inside a call of a perturbing class (gate_layout.PERTURBING_CLASSES: it submits
GPU work or moves memory) it may still put work on the device, so entry waits
until no such thread is left. Inside a host-side call (context creation, module
loading: 0.2-2 s under contention) it puts none of its tenant's work on a
stream, so entry does not wait: the call finishes outside the critical path
and the thread parks at its next gated call, the gate being closed.

After the close the threads inside gated calls can only become fewer (every
new call parks), so a process found with none inside stays so for the region:
it can be frozen or driver-locked as before. One that still has a thread inside
a host-side call is `deferred`: drained by its library's drain thread, not
driver-locked (the lock would wait for the call), frozen only once its calls
have returned (late_freeze.py: a freeze would stop a thread inside the driver,
or wait for it), and held by the gate meanwhile.

Bound: entry waits for the longest perturbing call in progress at the close
(an enqueue, or a synchronous copy behind the work queued before it, which the
drain waits for anyway), never for a host-side call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from krex_runtime.regions.entry.hints import told, unfounded
from krex_runtime.regions.freezer import is_stopped
from krex_runtime.regions.gate.core import Gate, ProcEntry
from krex_runtime.regions.gate.header_layout import PERTURBING_CLASSES


@dataclass(frozen=True)
class Quiesced:
    busy: list[ProcEntry]  # still inside a call entry waits for at the deadline (not stopped)
    inside_at_close: dict[str, int]  # call class -> the other tenants' threads inside when the gate closed
    waited_for: dict[str, int]  # the part of inside_at_close entry waited for
    deferred: list[ProcEntry]  # processes with a thread still inside a (host-side) call at the end
    unfounded: dict[int, str] = field(default_factory=dict)  # pid -> why its claim of a call in flight is not believed


def quiesce(
    gate: Gate, holder: int, timeout_s: float, *, every_call: bool = False, skip: frozenset[int] = frozenset(),
    no_context: frozenset[int] = frozenset(), contexts_known: bool = False,
) -> Quiesced:
    """Wait (bounded) until no other tenant is inside a call that may perturb the
    region (any call with `every_call`), saying what they were inside at the close.
    One scan of the gate when nobody is (each scan reads every process entry).
    `skip`: tenants frozen by another GPU's region (gpu_sets.py), not waited for;
    `no_context`: processes the GPU knows no context of (with `contexts_known`):
    a claim of theirs to a call that submits GPU work is not believed, nor waited
    for (entry/hints.py)."""
    entries = gate.others(holder, skip)
    lies = unfounded(entries, {e.pid for e in entries} - no_context) if contexts_known else {}
    for e in entries:
        if e.pid in lies:
            told(e.tenant_id, e.pid, lies[e.pid])
    entries = [e for e in entries if e.pid not in lies]
    at_close: dict[str, int] = {}
    for e in entries:
        for klass, n in e.in_class.items():
            at_close[klass] = at_close.get(klass, 0) + n
    waited = {c: n for c, n in at_close.items() if every_call or c in PERTURBING_CLASSES}
    busy: list[ProcEntry] = []
    if waited:
        busy = [e for e in gate.wait_quiescent(holder, timeout_s, every_call=every_call, skip=skip,
                                               ignore=frozenset(lies))
                if not is_stopped(e.pid)]
        entries = [e for e in gate.others(holder, skip) if e.pid not in lies]
    return Quiesced(busy, at_close, waited, _inside(entries), lies)


def deferred(gate: Gate, holder: int, skip: frozenset[int] = frozenset(),
             ignore: frozenset[int] = frozenset()) -> list[ProcEntry]:
    """Other tenants' processes with a thread still inside a gated call: after
    quiesce, a host-side one (none of `ignore`: claims not believed)."""
    return _inside([e for e in gate.others(holder, skip) if e.pid not in ignore])


def _inside(entries: list[ProcEntry]) -> list[ProcEntry]:
    # A stopped process is not let run: it cannot run. It is frozen and thawed with
    # the rest, as it always was.
    return [e for e in entries if e.in_call > 0 and not is_stopped(e.pid)]


def describe(entries: list[ProcEntry]) -> dict[str, dict[str, int]]:
    """pid -> call class -> threads inside, for the trace's region_granted."""
    return {str(e.pid): dict(e.in_class) for e in entries}
