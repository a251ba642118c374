"""The gate's layout: a mirror of native/include/krex_gate.h.

Magic, version, gate-word bits, drain results, call classes, default bounds,
the environment names tenants read, and each header and process-entry field
with its ctypes type and byte offset. `Gate` reads and writes through these
tables only; a test compiles the header and compares offsets and sizes.
"""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any, TypeAlias

from krex_runtime.tenant import env

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

MAGIC = 0x45544147584552  # "REXGATE\0" read as little-endian u64
VERSION = 3
MAX_PROCS = 256  # default entries per tenant
NO_HOLDER = -1
CLOSED = 1

PROC_FREE, PROC_CLAIMING, PROC_LIVE = 0, 1, 2
DRAIN_OK, DRAIN_TIMED_OUT, DRAIN_ERROR = 0, 1, 2
DRAIN_RESULTS = {DRAIN_OK: "ok", DRAIN_TIMED_OUT: "timed_out", DRAIN_ERROR: "error"}

# enum krex_call_class, in order.
CALL_CLASSES = (
    "launch", "host_func", "graph", "memcpy", "memset", "event",
    "stream_memop", "mem_async", "context", "module", "other", "memcpy_sync", "memset_sync", "memory",
)
CLASS_SLOTS = 16
# KREX_CLASS_PERTURBING: classes whose calls region entry waits for at the
# close (the others are host-side: context creation, module loading, memory
# allocation and release; the entry lets those in progress finish before it
# closes the gate: region_entry.py).
HOST_SIDE_CLASSES = frozenset({"context", "module", "memory"})
PERTURBING_CLASSES = tuple(c for c in CALL_CLASSES if c not in HOST_SIDE_CLASSES)
PERTURBING_MASK = sum(1 << i for i, c in enumerate(CALL_CLASSES) if c in PERTURBING_CLASSES)
HOST_SIDE_MASK = sum(1 << i for i, c in enumerate(CALL_CLASSES) if c in HOST_SIDE_CLASSES)

DEFAULT_STALE_NS = 3_000_000_000
DEFAULT_PARK_WAIT_NS = 50_000_000
DEFAULT_SPIN_NS = 20_000
DEFAULT_DRAIN_TIMEOUT_NS = 10_000_000_000

# The names a tenant is given are defined once, with the tenant-side code.
ENV_GATE_PATH = env.GATE_PATH
ENV_TENANT_ID = env.TENANT_ID
ENV_INTERCEPT_STATS = "KREX_INTERCEPT_STATS"
ENV_DRAIN_TIMEOUT_MS = "KREX_DRAIN_TIMEOUT_MS"
ENV_REGION_SOCKET = env.REGION_SOCKET

# (name, ctypes type, byte offset), a line per group of related fields. A test
# compiles a C program printing offsetof/sizeof of the header's structs and
# compares with these tables.
_u32, _i32, _u64, _i64 = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_int64
# A field's ctypes type: a scalar, or an array of scalars.
CType: TypeAlias = "type[ctypes._SimpleCData[Any]] | type[ctypes.Array[Any]]"

HEADER_FIELDS: tuple[tuple[str, CType, int], ...] = (
    ("magic", _u64, 0), ("version", _u32, 8),
    ("header_size", _u32, 12), ("proc_size", _u32, 16), ("max_procs", _u32, 20), ("procs_offset", _u32, 24),
    ("gate_word", _u32, 28), ("holder", _i64, 32), ("generation", _u64, 40),
    ("heartbeat_ns", _u64, 48), ("stale_after_ns", _u64, 56),
    ("park_wait_ns", _u64, 64), ("spin_ns", _u64, 72), ("drain_timeout_ns", _u64, 80),
    ("runtime_pid", _i32, 88),
    ("closed_at_ns", _u64, 96), ("opened_at_ns", _u64, 104),
    ("closed_classes", _u32, 112),
)
HEADER_SIZE = 256

PROC_FIELDS: tuple[tuple[str, CType, int], ...] = (
    ("state", _u32, 0), ("pid", _i32, 4), ("tenant_id", _i64, 8), ("start_time", _u64, 16),
    ("in_call", _u32, 24), ("parked", _u32, 28),
    ("drain_req", _u32, 32), ("drain_ack", _u32, 36), ("drain_result", _u32, 40),
    ("uses_cuda", _u32, 44), ("contexts", _u32, 48), ("fail_open", _u32, 52),
    ("calls_total", _u64, 56), ("parks_total", _u64, 64), ("drains_total", _u64, 72),
    ("calls", _u64 * CLASS_SLOTS, 80),
    ("drain_ack_ns", _u64, 208),
    ("in_perturbing", _u32, 216), ("in_class", ctypes.c_uint16 * CLASS_SLOTS, 220),
)
PROC_SIZE = 256

# name -> (ctype, offset), for access by field name.
HEADER = {name: (ctype, off) for name, ctype, off in HEADER_FIELDS}
PROC = {name: (ctype, off) for name, ctype, off in PROC_FIELDS}


def entries_size(max_procs: int) -> int:
    """Size of a tenant's entries file (the gate file is HEADER_SIZE bytes)."""
    return max_procs * PROC_SIZE


def _struct_of(fields: tuple[tuple[str, CType, int], ...], size: int) -> tuple[struct.Struct, tuple[tuple[str, int], ...]]:
    """A struct.Struct reading every field at once, and (name, values) in its order."""
    fmt, at = "<", 0
    names: list[tuple[str, int]] = []
    for name, ctype, off in sorted(fields, key=lambda f: f[2]):
        spec: Any = ctype  # typeshed does not describe ctypes' `_type_` and `_length_` class attributes
        element, count = (spec._type_, spec._length_) if issubclass(ctype, ctypes.Array) else (spec, 1)
        code = {1: "b", 2: "h", 4: "i", 8: "q"}[ctypes.sizeof(element)]
        fmt += f"{off - at}x" * (off > at) + f"{count}" * (count > 1) + (code if element._type_.islower() else code.upper())
        names.append((name, count))
        at = off + ctypes.sizeof(ctype)
    return struct.Struct(fmt + f"{size - at}x"), tuple(names)


# A process entry in one read: region entry scans every entry several times, and a
# ctypes read per field costs tens of microseconds per entry.
PROC_STRUCT, _PROC_ORDER = _struct_of(PROC_FIELDS, PROC_SIZE)


def unpack_proc(buffer: ReadableBuffer, offset: int) -> dict[str, Any]:
    """Every field of the process entry at `offset` (a snapshot, not atomic)."""
    values, i = PROC_STRUCT.unpack_from(buffer, offset), 0
    out: dict[str, Any] = {}  # each field's int, or tuple of ints for an array
    for name, count in _PROC_ORDER:
        out[name] = values[i] if count == 1 else values[i : i + count]
        i += count
    return out
