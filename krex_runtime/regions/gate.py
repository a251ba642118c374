"""The runtime's side of the per-GPU gate in shared memory (native/include/krex_gate.h).

One gate file per GPU, its path passed to every tenant of that GPU
(KREX_GATE_PATH, with KREX_TENANT_ID). The interception library preloaded
into each tenant maps it, registers its process and checks the gate before
every GPU submission. This module creates, closes, reopens and inspects the
gate, stamps the heartbeat and runs the drain handshake; the layout is in
gate_layout, futex and /proc calls in gate_kernel. Standard library only.

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
import gc
import logging
import mmap
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from krex_runtime.regions.gate_kernel import futex_wait, futex_wake_all, process_alive
from krex_runtime.regions.gate_layout import (
    CALL_CLASSES,
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
    file_size,
    unpack_proc,
)

log = logging.getLogger("krex.gate")


class GateError(Exception):
    """A gate file that cannot be used (missing, foreign, another version)."""

@dataclass(frozen=True)
class ProcEntry:
    """One registered process, read field by field (a snapshot, not atomic)."""

    index: int
    state: int
    pid: int
    tenant_id: int
    start_time: int
    in_call: int
    parked: int
    drain_req: int
    drain_ack: int
    drain_result: int
    uses_cuda: bool
    contexts: int
    fail_open: bool
    calls_total: int
    parks_total: int
    drains_total: int
    drain_ack_ns: int
    calls: dict[str, int]
    alive: bool
    in_perturbing: int = 0  # threads inside a call entry waits for (gate_layout.PERTURBING_CLASSES)
    in_class: dict[str, int] = field(default_factory=dict)  # threads inside a call, per class


@dataclass(frozen=True)
class DrainRequest:
    index: int
    pid: int
    start_time: int
    tenant_id: int
    seq: int


@dataclass(frozen=True)
class DrainOutcome:
    pid: int
    tenant_id: int
    result: str  # "ok" | "timed_out" | "error" (library's answer) | "no_ack" | "exited"


class Gate:
    """A mapped gate file. Create with Gate.create (the runtime) or Gate.attach."""

    def __init__(self, path: Path, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self._fd = fd
        self._mm = mm
        self.max_procs = self._hget("max_procs")

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
    ) -> Gate:
        """Create (or replace) the gate file: open, no holder, heartbeat stamped now.

        The file is built under a temporary name and renamed into place, so a
        tenant never maps a half-written gate; tenants still attached to a
        replaced file keep the old one (which stops beating, so they fail open).
        """
        path = Path(path)
        if not 1 <= max_procs <= 1 << 20:
            raise ValueError("max_procs out of range")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            os.ftruncate(fd, file_size(max_procs))
            mm = mmap.mmap(fd, file_size(max_procs), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        gate = cls.__new__(cls)
        gate.path, gate._fd, gate._mm, gate.max_procs = path, fd, mm, max_procs
        gate._hset("version", VERSION)
        gate._hset("header_size", HEADER_SIZE)
        gate._hset("proc_size", PROC_SIZE)
        gate._hset("max_procs", max_procs)
        gate._hset("procs_offset", HEADER_SIZE)
        gate._hset("holder", NO_HOLDER)
        gate._hset("stale_after_ns", int(stale_after_s * 1e9))
        gate._hset("park_wait_ns", int(park_wait_s * 1e9))
        gate._hset("spin_ns", int(spin_s * 1e9))
        gate._hset("drain_timeout_ns", int(drain_timeout_s * 1e9))
        gate._hset("runtime_pid", os.getpid())
        gate.stamp_heartbeat()
        gate._hset("magic", MAGIC)  # last: the library checks it first
        os.rename(tmp, path)
        return gate

    @classmethod
    def attach(cls, path: str | os.PathLike[str]) -> Gate:
        """Map an existing gate file (another runtime instance, a tool, a test)."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise GateError(f"{path}: {exc.strerror}") from None
        size = os.fstat(fd).st_size
        if size < HEADER_SIZE:
            os.close(fd)
            raise GateError(f"{path}: too small for a gate ({size} bytes)")
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        gate = cls(path, fd, mm)
        problems = []
        if gate._hget("magic") != MAGIC:
            problems.append("bad magic")
        if gate._hget("version") != VERSION:
            problems.append(f"version {gate._hget('version')} (want {VERSION})")
        if gate._hget("header_size") != HEADER_SIZE or gate._hget("proc_size") != PROC_SIZE:
            problems.append("struct sizes differ")
        if gate._hget("procs_offset") + gate.max_procs * PROC_SIZE > size:
            problems.append("file shorter than its process table")
        if problems:
            gate.detach()
            raise GateError(f"{path}: not a usable gate: {', '.join(problems)}")
        return gate

    def detach(self) -> None:
        """Unmap (the gate stays as it is). Never raises: mmap refuses to close while a ctypes
        view of it lives (an entry in a worker thread, a traceback); a view must not outlive it."""
        mm, self._mm = self._mm, None
        if mm is None:
            return
        os.close(self._fd)
        for attempt in range(20):
            try:
                return mm.close()
            except BufferError:
                if not attempt:
                    gc.collect()  # views held only by reference cycles go now
                time.sleep(0.01)  # a reader in another thread finishes its read
        log.warning("%s: the gate's mapping is still in use; it is unmapped when its last reader lets go", self.path)

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # -- raw access --

    def _view(self, ctype: type, off: int):
        mm = self._mm  # once: detach may run in another thread
        try:
            return ctype.from_buffer(mm, off)
        except (TypeError, ValueError):  # None, or closed meanwhile
            raise GateError(f"{self.path}: detached") from None

    def _hget(self, name: str) -> int:
        ctype, off = HEADER[name]
        return self._view(ctype, off).value

    def _hset(self, name: str, value: int) -> None:
        ctype, off = HEADER[name]
        self._view(ctype, off).value = value

    def _addr(self, off: int) -> int:
        return ctypes.addressof(self._view(ctypes.c_uint32, off))

    def _proc_off(self, index: int) -> int:
        return self._hget("procs_offset") + index * PROC_SIZE

    def _pget(self, index: int, name: str):
        ctype, off = PROC[name]
        return self._view(ctype, self._proc_off(index) + off)

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
        futex_wake_all(self._addr(HEADER["gate_word"][1]))  # full barrier, see module doc
        return generation

    def open_gate(self) -> None:
        """Reopen the gate and wake every parked thread."""
        self._hset("gate_word", ((self._hget("gate_word") + 2) & ~CLOSED) & 0xFFFFFFFF)
        self._hset("holder", NO_HOLDER)
        self._hset("opened_at_ns", time.monotonic_ns())
        futex_wake_all(self._addr(HEADER["gate_word"][1]))

    # -- processes --

    def entry(self, index: int) -> ProcEntry:
        try:
            f = unpack_proc(self._mm, self._proc_off(index))
        except (TypeError, ValueError):  # None, or closed meanwhile
            raise GateError(f"{self.path}: detached") from None
        calls, inside = f.pop("calls"), f.pop("in_class")
        f["uses_cuda"], f["fail_open"] = bool(f["uses_cuda"]), bool(f["fail_open"])
        return ProcEntry(
            index=index, **f, calls={name: calls[i] for i, name in enumerate(CALL_CLASSES)},
            in_class={name: inside[i] for i, name in enumerate(CALL_CLASSES) if inside[i]},
            alive=f["state"] == PROC_LIVE and process_alive(f["pid"], f["start_time"]),
        )

    def _live_indices(self) -> list[int]:
        """Indices of LIVE entries, read as one strided slice: region entry scans
        the table several times, and per-entry ctypes reads of 1024 entries
        would cost milliseconds each time."""
        start = self._hget("procs_offset") + PROC["state"][1]
        try:
            words = memoryview(self._mm)[start : start + self.max_procs * PROC_SIZE].cast("I")  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise GateError(f"{self.path}: detached") from None
        try:
            states = words[:: PROC_SIZE // 4]
            return [i for i, state in enumerate(states) if state == PROC_LIVE]
        finally:
            words.release()

    def processes(self, *, include_dead: bool = False) -> list[ProcEntry]:
        """Registered processes (LIVE entries); dead ones only when asked."""
        out = []
        for i in self._live_indices():
            e = self.entry(i)
            if e.alive or include_dead:
                out.append(e)
        return out

    def others(self, holder: int) -> list[ProcEntry]:
        """Live processes of tenants other than `holder`."""
        return [e for e in self.processes() if e.tenant_id != holder]

    def wait_quiescent(self, holder: int, timeout_s: float, *, every_call: bool = False) -> list[ProcEntry]:
        """Wait until no other tenant's thread is inside a gated call of a class in
        PERTURBING_CLASSES (of any class with `every_call`). Returns the processes still
        inside at the deadline (empty: quiescent); dead ones do not count."""
        deadline = time.monotonic() + timeout_s
        pause = 50e-6
        while True:
            busy = [e for e in self.others(holder) if (e.in_call if every_call else e.in_perturbing) > 0]
            if not busy or time.monotonic() >= deadline:
                return busy
            time.sleep(pause)
            pause = min(pause * 2, 2e-3)

    def request_drain(self, holder: int, pids: set[int] | None = None) -> list[DrainRequest]:
        """Ask every other live process (of `pids` only, if given) to synchronise its contexts."""
        requests = []
        for e in (e for e in self.others(holder) if pids is None or e.pid in pids):
            cell = self._pget(e.index, "drain_req")
            seq = (cell.value + 1) & 0xFFFFFFFF
            cell.value = seq
            futex_wake_all(self._addr(self._proc_off(e.index) + PROC["drain_req"][1]))
            requests.append(DrainRequest(e.index, e.pid, e.start_time, e.tenant_id, seq))
        return requests

    def wait_drained(self, requests: list[DrainRequest], timeout_s: float) -> list[DrainOutcome]:
        """Wait (bounded) for each request's acknowledgement."""
        deadline = time.monotonic() + timeout_s
        outcomes = []
        for r in requests:
            ack_off = self._proc_off(r.index) + PROC["drain_ack"][1]
            result = "no_ack"
            while True:
                ack = self._view(ctypes.c_uint32, ack_off).value
                if ack == r.seq:
                    result = DRAIN_RESULTS.get(self._pget(r.index, "drain_result").value, "error")
                    break
                if not process_alive(r.pid, r.start_time):
                    result = "exited"
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                futex_wait(self._addr(ack_off), ack, min(left, 0.05))
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
