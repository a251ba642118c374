"""The runtime's side of the per-GPU gate: a mirror of native/include/krex_gate.h.

The runtime creates one gate file per GPU and passes its path to every tenant
of that GPU (KREX_GATE_PATH, with KREX_TENANT_ID). The interception library
preloaded into each tenant maps it, registers its process in a free entry, and
checks the gate before every GPU submission. This module creates, closes,
reopens and inspects the gate, stamps the runtime heartbeat, and runs the
drain handshake. Standard library only.

Giving the GPU to tenant H (see krex_gate.h for the library's half):

    gate.close_gate(H)                       # holder = H, gate shut, generation + 1
    busy = gate.wait_quiescent(H, 5.0)       # no other tenant inside a driver call
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
import mmap
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0x45544147584552  # "REXGATE\0" read as little-endian u64
VERSION = 1
MAX_PROCS = 1024
NO_HOLDER = -1
CLOSED = 1

PROC_FREE, PROC_CLAIMING, PROC_LIVE = 0, 1, 2
DRAIN_OK, DRAIN_TIMED_OUT, DRAIN_ERROR = 0, 1, 2
DRAIN_RESULTS = {DRAIN_OK: "ok", DRAIN_TIMED_OUT: "timed_out", DRAIN_ERROR: "error"}

# enum krex_call_class, in order.
CALL_CLASSES = (
    "launch", "host_func", "graph", "memcpy", "memset", "event",
    "stream_memop", "mem_async", "context", "module", "other",
)
CLASS_SLOTS = 16

DEFAULT_STALE_NS = 3_000_000_000
DEFAULT_PARK_WAIT_NS = 50_000_000
DEFAULT_SPIN_NS = 20_000
DEFAULT_DRAIN_TIMEOUT_NS = 10_000_000_000

ENV_GATE_PATH = "KREX_GATE_PATH"
ENV_TENANT_ID = "KREX_TENANT_ID"
ENV_INTERCEPT_STATS = "KREX_INTERCEPT_STATS"
ENV_DRAIN_TIMEOUT_MS = "KREX_DRAIN_TIMEOUT_MS"
ENV_REGION_SOCKET = "KREX_REGION_SOCKET"

# (name, ctypes type, byte offset). A test compiles a C program printing
# offsetof/sizeof of the header's structs and compares with these tables.
HEADER_FIELDS: tuple[tuple[str, type, int], ...] = (
    ("magic", ctypes.c_uint64, 0),
    ("version", ctypes.c_uint32, 8),
    ("header_size", ctypes.c_uint32, 12),
    ("proc_size", ctypes.c_uint32, 16),
    ("max_procs", ctypes.c_uint32, 20),
    ("procs_offset", ctypes.c_uint32, 24),
    ("gate_word", ctypes.c_uint32, 28),
    ("holder", ctypes.c_int64, 32),
    ("generation", ctypes.c_uint64, 40),
    ("heartbeat_ns", ctypes.c_uint64, 48),
    ("stale_after_ns", ctypes.c_uint64, 56),
    ("park_wait_ns", ctypes.c_uint64, 64),
    ("spin_ns", ctypes.c_uint64, 72),
    ("drain_timeout_ns", ctypes.c_uint64, 80),
    ("runtime_pid", ctypes.c_int32, 88),
    ("closed_at_ns", ctypes.c_uint64, 96),
    ("opened_at_ns", ctypes.c_uint64, 104),
)
HEADER_SIZE = 256

PROC_FIELDS: tuple[tuple[str, type, int], ...] = (
    ("state", ctypes.c_uint32, 0),
    ("pid", ctypes.c_int32, 4),
    ("tenant_id", ctypes.c_int64, 8),
    ("start_time", ctypes.c_uint64, 16),
    ("in_call", ctypes.c_uint32, 24),
    ("parked", ctypes.c_uint32, 28),
    ("drain_req", ctypes.c_uint32, 32),
    ("drain_ack", ctypes.c_uint32, 36),
    ("drain_result", ctypes.c_uint32, 40),
    ("uses_cuda", ctypes.c_uint32, 44),
    ("contexts", ctypes.c_uint32, 48),
    ("fail_open", ctypes.c_uint32, 52),
    ("calls_total", ctypes.c_uint64, 56),
    ("parks_total", ctypes.c_uint64, 64),
    ("drains_total", ctypes.c_uint64, 72),
    ("calls", ctypes.c_uint64 * CLASS_SLOTS, 80),
    ("drain_ack_ns", ctypes.c_uint64, 208),
)
PROC_SIZE = 256

_H = {name: (ctype, off) for name, ctype, off in HEADER_FIELDS}
_P = {name: (ctype, off) for name, ctype, off in PROC_FIELDS}


def file_size(max_procs: int) -> int:
    return HEADER_SIZE + max_procs * PROC_SIZE


class GateError(Exception):
    """A gate file that cannot be used (missing, foreign, another version)."""


# ---- futex (ctypes syscall; the gate lives in a shared file mapping) ---------

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine(), 202)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _futex_wake_all(addr: int) -> None:
    _syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(_FUTEX_WAKE),
             ctypes.c_int(0x7FFFFFFF), None, None, ctypes.c_int(0))


def _futex_wait(addr: int, expected: int, timeout_s: float) -> None:
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    _syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(_FUTEX_WAIT),
             ctypes.c_uint32(expected), ctypes.byref(ts), None, ctypes.c_int(0))


# ---- process liveness ---------------------------------------------------------

def _proc_start_time(pid: int) -> tuple[int, str] | None:
    """(start time in ticks, state letter) from /proc/<pid>/stat, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, start_time: int) -> bool:
    """True if pid still names the process that registered (not a zombie, not reused)."""
    if pid <= 0:
        return False
    info = _proc_start_time(pid)
    if info is None:
        return False
    ticks, state = info
    if state in ("Z", "X"):
        return False
    return start_time == 0 or ticks == start_time


# ---- snapshots ----------------------------------------------------------------

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


# ---- the gate -----------------------------------------------------------------

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
        """Unmap (the gate itself stays as it is; see open_gate)."""
        if self._mm is not None:
            self._mm.close()
            os.close(self._fd)
            self._mm = None

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # -- raw access --

    def _view(self, ctype: type, off: int):
        if self._mm is None:
            raise GateError(f"{self.path}: detached")
        return ctype.from_buffer(self._mm, off)

    def _hget(self, name: str) -> int:
        ctype, off = _H[name]
        return self._view(ctype, off).value

    def _hset(self, name: str, value: int) -> None:
        ctype, off = _H[name]
        self._view(ctype, off).value = value

    def _addr(self, off: int) -> int:
        return ctypes.addressof(self._view(ctypes.c_uint32, off))

    def _proc_off(self, index: int) -> int:
        return self._hget("procs_offset") + index * PROC_SIZE

    def _pget(self, index: int, name: str):
        ctype, off = _P[name]
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
        if stale_after_s is not None:
            self._hset("stale_after_ns", int(stale_after_s * 1e9))
        if drain_timeout_s is not None:
            self._hset("drain_timeout_ns", int(drain_timeout_s * 1e9))
        if park_wait_s is not None:
            self._hset("park_wait_ns", int(park_wait_s * 1e9))

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
        _futex_wake_all(self._addr(_H["gate_word"][1]))  # full barrier, see module doc
        return generation

    def open_gate(self) -> None:
        """Reopen the gate and wake every parked thread."""
        self._hset("gate_word", ((self._hget("gate_word") + 2) & ~CLOSED) & 0xFFFFFFFF)
        self._hset("holder", NO_HOLDER)
        self._hset("opened_at_ns", time.monotonic_ns())
        _futex_wake_all(self._addr(_H["gate_word"][1]))

    # -- processes --

    def entry(self, index: int) -> ProcEntry:
        get = lambda name: self._pget(index, name).value
        calls_arr = self._pget(index, "calls")
        pid, start = get("pid"), get("start_time")
        state = get("state")
        return ProcEntry(
            index=index, state=state, pid=pid, tenant_id=get("tenant_id"), start_time=start,
            in_call=get("in_call"), parked=get("parked"), drain_req=get("drain_req"),
            drain_ack=get("drain_ack"), drain_result=get("drain_result"),
            uses_cuda=bool(get("uses_cuda")), contexts=get("contexts"), fail_open=bool(get("fail_open")),
            calls_total=get("calls_total"), parks_total=get("parks_total"), drains_total=get("drains_total"),
            drain_ack_ns=get("drain_ack_ns"),
            calls={name: calls_arr[i] for i, name in enumerate(CALL_CLASSES)},
            alive=state == PROC_LIVE and process_alive(pid, start),
        )

    def _live_indices(self) -> list[int]:
        """Indices of LIVE entries, read as one strided slice: region entry scans
        the table several times, and per-entry ctypes reads of 1024 entries
        would cost milliseconds each time."""
        if self._mm is None:
            raise GateError(f"{self.path}: detached")
        start = self._hget("procs_offset") + _P["state"][1]
        words = memoryview(self._mm)[start : start + self.max_procs * PROC_SIZE].cast("I")
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

    def wait_quiescent(self, holder: int, timeout_s: float) -> list[ProcEntry]:
        """Wait until no other tenant's thread is inside a gated call.

        Returns the processes still inside at the deadline (empty: quiescent).
        Dead processes do not count (a killed tenant may leave in_call > 0).
        """
        deadline = time.monotonic() + timeout_s
        pause = 50e-6
        while True:
            busy = [e for e in self.others(holder) if e.in_call > 0]
            if not busy or time.monotonic() >= deadline:
                return busy
            time.sleep(pause)
            pause = min(pause * 2, 2e-3)

    def request_drain(self, holder: int) -> list[DrainRequest]:
        """Ask every other live process to synchronise its contexts."""
        requests = []
        for e in self.others(holder):
            cell = self._pget(e.index, "drain_req")
            seq = (cell.value + 1) & 0xFFFFFFFF
            cell.value = seq
            _futex_wake_all(self._addr(self._proc_off(e.index) + _P["drain_req"][1]))
            requests.append(DrainRequest(e.index, e.pid, e.start_time, e.tenant_id, seq))
        return requests

    def wait_drained(self, requests: list[DrainRequest], timeout_s: float) -> list[DrainOutcome]:
        """Wait (bounded) for each request's acknowledgement."""
        deadline = time.monotonic() + timeout_s
        outcomes = []
        for r in requests:
            ack_off = self._proc_off(r.index) + _P["drain_ack"][1]
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
                _futex_wait(self._addr(ack_off), ack, min(left, 0.05))
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
