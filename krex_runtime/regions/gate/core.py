"""The runtime's side of the per-GPU gate in shared memory (native/include/krex_gate.h).

One gate file per GPU, its path passed to every tenant of that GPU
(KREX_GATE_PATH, with KREX_TENANT_ID). It holds the header alone, which
only the runtime writes; each tenant's process entries are in a file of
their own that the runtime makes before the tenant starts (add_tenant) and
removes after it (remove_tenant), see files.py. The interception library
preloaded into each tenant maps the header read-only and its entries
read-write, registers its process and checks the gate before every GPU
submission. This module creates, closes, reopens and inspects the gate,
stamps the heartbeat and runs the drain handshake; the layout is in
header_layout.py, futex and /proc calls in kernel.py. Standard library only.

Giving the GPU to tenant H (see krex_gate.h for the library's half):

    gate.close_gate(H)                       # holder = H, gate shut, generation + 1
    busy = gate.wait_quiescent(H, 5.0)       # no other tenant inside a call that perturbs
    outcomes = gate.drain(H, 10.0)           # each other process synchronised its contexts
    ...                                      # freeze, pin, grant, measure, thaw
    gate.open_gate()                         # wake every parked thread

Only the runtime writes the gate word, so plain aligned stores suffice here;
the FUTEX_WAKE made right after each store is a full barrier on Linux (the
kernel's waiter check is preceded by smp_mb), which orders "close" before the
later reads of in_call as the protocol needs. The runtime must call
stamp_heartbeat() well within stale_after_s, or tenants fail open.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from krex_runtime.regions.gate.files import (
    DrainOutcome,
    DrainRequest,
    GateError,
    Mapping,
    ProcEntry,
    entries_files,
    entries_path,
)
from krex_runtime.regions.gate.header_layout import (
    CALL_CLASSES,
    CLASS_SLOTS,
    CLOSED,
    DEFAULT_DRAIN_TIMEOUT_NS,
    DEFAULT_PARK_WAIT_NS,
    DEFAULT_SPIN_NS,
    DEFAULT_STALE_NS,
    DRAIN_RESULTS,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_PROCS,
    NO_HOLDER,
    PROC,
    PROC_LIVE,
    PROC_SIZE,
    VERSION,
    entries_size,
    unpack_proc,
)
from krex_runtime.regions.gate.kernel import futex_wait, futex_wake_all, process_alive

__all__ = ["DrainOutcome", "DrainRequest", "Gate", "GateError", "ProcEntry"]

FORMER_KEPT = 4096  # processes of removed entries files whose tenant is kept (Gate.registered)


class Gate:
    """A mapped gate: its header and the entries files of its tenants.
    Create with Gate.create (the runtime) or Gate.attach (a tool, a test)."""

    def __init__(self, path: Path, header: Mapping) -> None:
        self.path = path
        self._header = header
        self.max_procs = self._hget("max_procs")  # entries per tenant
        self._tables: dict[int, Mapping] = {}  # tenant id -> its entries
        self._owners: dict[int, int] = {}  # tenant id -> the uid its processes run as, where it has its own
        # (tenant id, pid, start time) -> why an entry is not believed, None: it is
        # (regions/entry/hints.py; None: every live entry of its owner's process is).
        self.vouch: Callable[[int, int, int], str | None] | None = None
        self._former: dict[tuple[int, int], int] = {}  # (pid, start time) -> tenant, of removed files

    # -- lifetime --

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        max_procs: int = MAX_PROCS,
        stale_after_s: float = DEFAULT_STALE_NS / 1e9,
        park_wait_s: float = DEFAULT_PARK_WAIT_NS / 1e9,
        spin_s: float = DEFAULT_SPIN_NS / 1e9,
        drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_NS / 1e9,
        mode: int = 0o644,
    ) -> Gate:
        """Create (or replace) the gate file: open, no holder, heartbeat stamped now.
        `max_procs` is the number of entries each tenant gets. Tenants still
        attached to a replaced file keep the old one (which stops beating, so
        they fail open)."""
        path = Path(path)
        if not 1 <= max_procs <= 1 << 16:
            raise ValueError("max_procs out of range")
        for stale in entries_files(path).values():  # a previous runtime's tenants
            stale.unlink(missing_ok=True)
        gate = cls.__new__(cls)
        gate.path, gate.max_procs, gate._tables, gate._owners = path, max_procs, {}, {}
        gate.vouch, gate._former = None, {}
        tmp_header = Mapping.create(path.with_name(f".{path.name}.new"), HEADER_SIZE, mode=mode)
        gate._header = tmp_header
        gate._hset("version", VERSION)
        gate._hset("header_size", HEADER_SIZE)
        gate._hset("proc_size", PROC_SIZE)
        gate._hset("max_procs", max_procs)
        gate._hset("procs_offset", 0)
        gate._hset("holder", NO_HOLDER)
        gate._hset("stale_after_ns", int(stale_after_s * 1e9))
        gate._hset("park_wait_ns", int(park_wait_s * 1e9))
        gate._hset("spin_ns", int(spin_s * 1e9))
        gate._hset("drain_timeout_ns", int(drain_timeout_s * 1e9))
        gate._hset("runtime_pid", os.getpid())
        gate.stamp_heartbeat()
        gate._hset("magic", MAGIC)  # last: the library checks it first
        os.rename(tmp_header.path, path)
        tmp_header.path = path
        return gate

    @classmethod
    def attach(cls, path: str | os.PathLike[str], *, writable: bool = True) -> Gate:
        """Map an existing gate and its tenants' entries (another runtime
        instance, a tool, a test; `writable=False` maps it as a tenant does)."""
        path = Path(path)
        header = Mapping.open(path, writable=writable)
        if header.size < HEADER_SIZE:
            header.close()
            raise GateError(f"{path}: too small for a gate ({header.size} bytes)")
        gate = cls(path, header)
        problems = []
        if gate._hget("magic") != MAGIC:
            problems.append("bad magic")
        if gate._hget("version") != VERSION:
            problems.append(f"version {gate._hget('version')} (want {VERSION})")
        if gate._hget("header_size") != HEADER_SIZE or gate._hget("proc_size") != PROC_SIZE:
            problems.append("struct sizes differ")
        if problems:
            gate.detach()
            raise GateError(f"{path}: not a usable gate: {', '.join(problems)}")
        for tenant, entries in entries_files(path).items():
            try:
                table = Mapping.open(entries, writable=writable)
            except GateError:
                continue  # removed meanwhile, or another tenant's
            # Its owner from the open file: the path may be gone already (the tenant ended).
            if table.size < entries_size(gate.max_procs):
                table.close()
                continue
            gate._tables[tenant] = table
            if table.owner_uid != os.geteuid():
                gate._owners[tenant] = table.owner_uid
        return gate

    def add_tenant(self, tenant_id: int, *, owner: tuple[int, int] = (-1, -1), mode: int = 0o600) -> Path:
        """Make the tenant's entries file (before the tenant starts), owned by
        `owner` (uid, gid) with `mode`; returns its path."""
        path = entries_path(self.path, tenant_id)
        old = self._tables.pop(tenant_id, None)
        if old is not None:
            old.close()
        self._tables[tenant_id] = Mapping.create(path, entries_size(self.max_procs), owner=owner, mode=mode)
        if owner[0] != -1:
            self._owners[tenant_id] = owner[0]
        return path

    def remove_tenant(self, tenant_id: int) -> None:
        """Forget a tenant whose processes have all ended, and remove its entries file
        (whose its processes were is kept a while: `registered`)."""
        try:
            for i in self._live_indices(tenant_id) if tenant_id in self._tables else []:
                e = self._table(tenant_id).unpack(unpack_proc, i * PROC_SIZE)
                self._former[(e["pid"], e["start_time"])] = tenant_id
        except GateError:
            pass
        while len(self._former) > FORMER_KEPT:
            del self._former[next(iter(self._former))]
        table = self._tables.pop(tenant_id, None)
        self._owners.pop(tenant_id, None)
        entries_path(self.path, tenant_id).unlink(missing_ok=True)
        if table is not None:
            table.close()

    @property
    def tenants(self) -> list[int]:
        return list(self._tables)

    def registered(self) -> dict[tuple[int, int], int]:
        """(pid, start time) -> tenant id of every process registered in an entries
        file, ended ones too: those in the files now (an entry stays until its
        place is needed) and the last FORMER_KEPT of files removed since."""
        found = dict(self._former)
        found.update({(e.pid, e.start_time): e.tenant_id for e in self.processes(include_dead=True)})
        return found

    def detach(self, *, remove_tenants: bool = False) -> None:
        """Unmap everything (the gate stays as it is; see open_gate); with
        `remove_tenants`, the entries files go too. Never raises."""
        for tenant in list(self._tables):
            if remove_tenants:
                self.remove_tenant(tenant)
            else:
                self._tables.pop(tenant).close()
        self._header.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # -- raw access --

    def _hget(self, name: str) -> int:
        ctype, off = HEADER[name]
        return self._header.read(ctype, off)

    def _hset(self, name: str, value: int) -> None:
        ctype, off = HEADER[name]
        self._header.view(ctype, off).value = value

    def _table(self, tenant: int) -> Mapping:
        table = self._tables.get(tenant)
        if table is None:
            raise GateError(f"{self.path}: no tenant {tenant}")
        return table

    def _pget(self, tenant: int, index: int, name: str) -> Any:
        ctype, off = PROC[name]
        return self._table(tenant).view(ctype, index * PROC_SIZE + off)

    # -- state --

    @property
    def gate_word(self) -> int:
        return self._hget("gate_word")

    @property
    def is_closed(self) -> bool:
        return bool(self.gate_word & CLOSED)

    @property
    def holder(self) -> int:
        return self._hget("holder")

    @property
    def generation(self) -> int:
        return self._hget("generation")

    @property
    def heartbeat_ns(self) -> int:
        return self._hget("heartbeat_ns")

    def stamp_heartbeat(self, now_ns: int | None = None) -> None:
        """Tell tenants the runtime is alive (CLOCK_MONOTONIC ns, like the library)."""
        self._hset("heartbeat_ns", time.monotonic_ns() if now_ns is None else now_ns)

    def set_bounds(self, *, stale_after_s: float | None = None, drain_timeout_s: float | None = None,
                   park_wait_s: float | None = None) -> None:
        for name, value in (("stale_after_ns", stale_after_s), ("drain_timeout_ns", drain_timeout_s),
                            ("park_wait_ns", park_wait_s)):
            if value is not None:
                self._hset(name, int(value * 1e9))

    def close_gate(self, holder: int) -> int:
        """Shut the gate for every tenant but `holder`; returns the new generation.

        Threads inside a driver call finish it; later submissions park. Follow
        with wait_quiescent() and drain().
        """
        if holder == NO_HOLDER:
            raise ValueError("a closed gate needs a holder tenant id")
        self.stamp_heartbeat()
        self._hset("holder", holder)
        generation = self._hget("generation") + 1
        self._hset("generation", generation)
        self._hset("closed_at_ns", time.monotonic_ns())
        self._hset("gate_word", ((self._hget("gate_word") + 2) | CLOSED) & 0xFFFFFFFF)
        futex_wake_all(self._header.addr(HEADER["gate_word"][1]))  # full barrier, see module doc
        return generation

    def close_classes(self, holder: int, mask: int) -> None:
        """Park every tenant but `holder` at its next call of a class in `mask`
        (gate_layout's bits), the gate otherwise open: GPU work goes on. Threads
        inside such a call finish it (the entry waits for them: region_entry.py)."""
        if holder == NO_HOLDER:
            raise ValueError("closing classes needs a holder tenant id")
        self.stamp_heartbeat()
        self._hset("holder", holder)
        self._hset("closed_classes", mask)
        self._hset("gate_word", (self._hget("gate_word") + 2) & 0xFFFFFFFF)
        futex_wake_all(self._header.addr(HEADER["gate_word"][1]))  # full barrier, as close_gate's

    def inside_classes(self, holder: int, classes: frozenset[str], skip: frozenset[int] = frozenset()) -> list[ProcEntry]:
        """Other tenants' processes with a thread inside a call of one of `classes`."""
        return [e for e in self.others(holder, skip) if any(e.in_class.get(c, 0) for c in classes)]

    def open_gate(self) -> None:
        """Reopen the gate (every class) and wake every parked thread."""
        self._hset("closed_classes", 0)
        self._hset("gate_word", ((self._hget("gate_word") + 2) & ~CLOSED) & 0xFFFFFFFF)
        self._hset("holder", NO_HOLDER)
        self._hset("opened_at_ns", time.monotonic_ns())
        futex_wake_all(self._header.addr(HEADER["gate_word"][1]))

    # -- processes --

    def entry(self, tenant: int, index: int) -> ProcEntry:
        """One entry, its tenant taken from the file it is in (a tenant writes
        its entries' tenant_id itself, so that field is not believed); read in
        one struct read (region entry scans every entry several times)."""
        f = self._table(tenant).unpack(unpack_proc, index * PROC_SIZE)
        calls, inside = f.pop("calls"), f.pop("in_class")
        f["uses_cuda"], f["fail_open"], f["tenant_id"] = bool(f["uses_cuda"]), bool(f["fail_open"]), tenant
        return ProcEntry(
            index=index, **f, calls={name: calls[i] for i, name in enumerate(CALL_CLASSES[:CLASS_SLOTS])},
            in_class={name: inside[i] for i, name in enumerate(CALL_CLASSES[:CLASS_SLOTS]) if inside[i]},
            alive=f["state"] == PROC_LIVE and process_alive(f["pid"], f["start_time"]) and self._runs_as_owner(tenant, f["pid"])
            and (self.vouch is None or self.vouch(tenant, f["pid"], f["start_time"]) is None),
        )

    def _runs_as_owner(self, tenant: int, pid: int) -> bool:
        """A tenant with a uid of its own writes its entries itself: an entry
        naming a process of another uid (another tenant's, to have the runtime
        drain or lock it) is not believed, and counts as no process."""
        uid = self._owners.get(tenant)
        if uid is None:
            return True
        try:
            return os.stat(f"/proc/{pid}").st_uid == uid
        except OSError:
            return False

    def _live_indices(self, tenant: int) -> list[int]:
        """Indices of a tenant's LIVE entries, read as one strided slice: region
        entry scans the entries several times, and per-entry ctypes reads
        would cost milliseconds each time."""
        words = self._table(tenant).words(PROC["state"][1], self.max_procs * PROC_SIZE)
        try:
            states = words[:: PROC_SIZE // 4]
            return [i for i, state in enumerate(states) if state == PROC_LIVE]
        finally:
            words.release()

    def processes(self, *, include_dead: bool = False) -> list[ProcEntry]:
        """Registered processes (LIVE entries) of every tenant; dead ones only when asked."""
        out = []
        for tenant in list(self._tables):
            try:
                entries = [self.entry(tenant, i) for i in self._live_indices(tenant)]
            except GateError:  # the tenant was removed meanwhile
                continue
            out += [e for e in entries if e.alive or include_dead]
        return out

    def others(self, holder: int, skip: frozenset[int] = frozenset()) -> list[ProcEntry]:
        """Live processes of tenants other than `holder` (and those in `skip`:
        tenants of several GPUs another GPU's region holds frozen, gpu_sets.py)."""
        return [e for e in self.processes() if e.tenant_id != holder and e.tenant_id not in skip]

    def wait_quiescent(
        self, holder: int, timeout_s: float, *, every_call: bool = False, skip: frozenset[int] = frozenset(),
        ignore: frozenset[int] = frozenset(),
    ) -> list[ProcEntry]:
        """Wait until no other tenant's thread is inside a gated call of a class in
        PERTURBING_CLASSES (of any class with `every_call`). Returns the processes still
        inside at the deadline (empty: quiescent); dead ones do not count, nor the pids
        in `ignore` (claims not believed: entry/hints.py)."""
        deadline = time.monotonic() + timeout_s
        pause = 50e-6
        while True:
            busy = [e for e in self.others(holder, skip) if (e.in_call if every_call else e.in_perturbing) > 0
                    and e.pid not in ignore]
            if not busy or time.monotonic() >= deadline:
                return busy
            time.sleep(pause)
            pause = min(pause * 2, 2e-3)

    def request_drain(
        self, holder: int, pids: set[int] | None = None, skip: frozenset[int] = frozenset(),
        ignore: frozenset[int] = frozenset(),
    ) -> list[DrainRequest]:
        """Ask every other live process (of `pids` only, if given; none of `ignore`:
        processes the GPU knows no context of, with nothing to drain) to synchronise its contexts."""
        requests = []
        for e in (e for e in self.others(holder, skip) if (pids is None or e.pid in pids) and e.pid not in ignore):
            try:
                cell = self._pget(e.tenant_id, e.index, "drain_req")
                seq = (cell.value + 1) & 0xFFFFFFFF
                cell.value = seq
                futex_wake_all(ctypes.addressof(cell))
            except GateError:  # the tenant ended meanwhile
                continue
            requests.append(DrainRequest(e.index, e.pid, e.start_time, e.tenant_id, seq))
        return requests

    def wait_drained(self, requests: list[DrainRequest], timeout_s: float) -> list[DrainOutcome]:
        """Wait (bounded) for each request's acknowledgement."""
        deadline = time.monotonic() + timeout_s
        outcomes = []
        for r in requests:
            result = "no_ack"
            while True:
                try:
                    cell = self._pget(r.tenant_id, r.index, "drain_ack")
                    ack = cell.value
                    if ack == r.seq:
                        result = DRAIN_RESULTS.get(self._pget(r.tenant_id, r.index, "drain_result").value, "error")
                        break
                except GateError:  # the tenant ended meanwhile
                    result = "exited"
                    break
                if not process_alive(r.pid, r.start_time):
                    result = "exited"
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                futex_wait(ctypes.addressof(cell), ack, min(left, 0.05))
                del cell
            outcomes.append(DrainOutcome(r.pid, r.tenant_id, result))
        return outcomes

    def drain(self, holder: int, timeout_s: float) -> list[DrainOutcome]:
        """request_drain + wait_drained."""
        return self.wait_drained(self.request_drain(holder), timeout_s)

    def parked(self, tenant: int | None = None) -> int:
        """Threads parked now, over all live processes (or one tenant's)."""
        return sum(e.parked for e in self.processes() if tenant is None or e.tenant_id == tenant)

    def in_call(self, tenant: int | None = None) -> int:
        return sum(e.in_call for e in self.processes() if tenant is None or e.tenant_id == tenant)
