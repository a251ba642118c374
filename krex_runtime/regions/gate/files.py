"""The files a gate is made of (native/include/krex_gate.h, "Files"), mapped.

The gate file holds the header alone; only the runtime writes it, tenants map
it read-only. Each tenant's process entries live in a file of their own next
to it, `<gate>.<tenant id>`, which the runtime makes before the tenant starts,
owned by the tenant's user and writable by nobody else but the runtime (root,
or the owner when tenants run as the runtime's user). So a tenant that writes
what it can reach changes its own entries only: never the gate word, the
holder or the heartbeat, never another tenant's entries.

What is read out of entries (ProcEntry, DrainRequest, DrainOutcome) is here
too. `Mapping` is one mapped file; closing it never raises (a ctypes view still
alive in another thread lets it go when its reader does).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from krex_runtime.regions.gate.header_layout import CType

log = logging.getLogger("krex.gate")
T = TypeVar("T")


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


class Mapping:
    def __init__(self, path: Path, mm: mmap.mmap, owner_uid: int = -1) -> None:
        self.path = path
        self._mm: mmap.mmap | None = mm
        self.owner_uid = owner_uid  # the file's, as it was opened (-1: made here)

    @classmethod
    def open(cls, path: Path, *, writable: bool = True) -> Mapping:
        try:
            fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            raise GateError(f"{path}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if st.st_size == 0:
                raise GateError(f"{path}: empty")
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            return cls(path, mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, prot), st.st_uid)
        finally:
            os.close(fd)

    @classmethod
    def create(cls, path: Path, size: int, *, owner: tuple[int, int] = (-1, -1), mode: int = 0o600) -> Mapping:
        """A new file of `size` zero bytes, built under a temporary name and
        renamed into place (nobody maps a half-made file), with its owner and
        mode set before it gets its name."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, size)
            if owner != (-1, -1):
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.rename(tmp, path)
        return cls(path, mm)

    @property
    def size(self) -> int:
        mm = self._mm
        return len(mm) if mm is not None else 0

    def view(self, ctype: CType, off: int) -> Any:
        """The field at `off`, in place: a ctypes value of `ctype`."""
        mm = self._mm  # once: close may run in another thread
        if mm is None:
            raise GateError(f"{self.path}: detached")
        try:
            return ctype.from_buffer(mm, off)
        except (TypeError, ValueError):  # None, closed meanwhile, or read-only
            raise GateError(f"{self.path}: detached") from None

    def copy(self, ctype: CType, off: int) -> Any:
        """A copy of what is at `off` (works on a read-only mapping too)."""
        mm = self._mm
        if mm is None:
            raise GateError(f"{self.path}: detached")
        try:
            return ctype.from_buffer_copy(mm, off)
        except (TypeError, ValueError):  # None, or closed meanwhile
            raise GateError(f"{self.path}: detached") from None

    def unpack(self, reader: Callable[[Any, int], T], off: int) -> T:
        """`reader(buffer, off)` on the mapping (gate_layout.unpack_proc: one entry in one read)."""
        try:
            return reader(self._mm, off)
        except (TypeError, ValueError, struct.error):  # None, or closed meanwhile
            raise GateError(f"{self.path}: detached") from None

    def read(self, ctype: type, off: int) -> int:
        return int(self.copy(ctype, off).value)

    def addr(self, off: int) -> int:
        return ctypes.addressof(self.view(ctypes.c_uint32, off))

    def words(self, start: int, length: int) -> memoryview:
        """u32 words of [start, start + length), as a view the caller releases."""
        try:
            return memoryview(self._mm)[start : start + length].cast("I")  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise GateError(f"{self.path}: detached") from None

    def close(self) -> None:
        """Unmap. Never raises: mmap refuses to close while a ctypes view of it
        lives (an entry still in its worker thread at shutdown, a traceback),
        and a view must not outlive its memory."""
        mm, self._mm = self._mm, None
        if mm is None:
            return
        for attempt in range(20):
            try:
                return mm.close()
            except BufferError:
                if not attempt:
                    gc.collect()  # views held only by reference cycles go now
                time.sleep(0.01)  # a reader in another thread finishes its read
        log.warning("%s: the gate's mapping is still in use; it is unmapped when its last reader lets go", self.path)


def entries_path(gate_path: Path, tenant_id: int) -> Path:
    """KREX_GATE_ENTRIES_FMT: where the tenant's process entries live."""
    return gate_path.with_name(f"{gate_path.name}.{tenant_id}")


def entries_files(gate_path: Path) -> dict[int, Path]:
    """The entries files next to a gate file, by tenant id (for tools and checks)."""
    found = {}
    for path in gate_path.parent.glob(f"{gate_path.name}.*"):
        suffix = path.name[len(gate_path.name) + 1 :]
        if suffix.lstrip("-").isdigit():
            found[int(suffix)] = path
    return found
