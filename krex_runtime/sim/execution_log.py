"""The simulator's execution log (KREX_SIM_LOG) read back as records.

Every kernel, copy, memset and lock event the simulated driver executes is
appended as one fixed-size record; tests and benchmarks read them to check
what ran when (and what overlapped) with no driver loaded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from krex_runtime.sim.layout import KIND_NAMES, LOG_MAGIC, LOG_RECORD, LOG_VERSION


@dataclass(frozen=True)
class Record:
    """One executed item (or lock event) of the execution log."""

    kind: int
    pid: int
    tenant_id: int
    device: int
    target_pid: int
    stream_id: int
    start_ns: int
    end_ns: int
    solo_ns: int
    bytes: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    name: str

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, f"kind{self.kind}")

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def parse_record(raw: bytes) -> Record:
    v = LOG_RECORD.unpack(raw)
    magic, version, kind, pid, tenant, device, target, stream, start, end, solo, nbytes = v[:12]
    if magic != LOG_MAGIC or version != LOG_VERSION:
        raise ValueError(f"not a simulator log record (magic {magic:#x}, version {version})")
    grid, block, name = tuple(v[12:15]), tuple(v[15:18]), v[18]
    return Record(kind, pid, tenant, device, target, stream, start, end, solo, nbytes,
                  grid, block, name.rstrip(b"\0").decode("utf-8", "replace"))


def read_execution_log(path: str | os.PathLike[str]) -> list[Record]:
    """All records of an execution log, in file order (a missing file is empty)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    size = LOG_RECORD.size
    whole = len(data) - len(data) % size  # a writer may be mid-record only if it died
    return [parse_record(data[i:i + size]) for i in range(0, whole, size)]



def overlapping(records: Iterable[Record]) -> list[tuple[Record, Record]]:
    """Pairs of records whose [start, end) intervals overlap in time."""
    rs = sorted(records, key=lambda r: r.start_ns)
    pairs = []
    for i, a in enumerate(rs):
        for b in rs[i + 1:]:
            if b.start_ns >= a.end_ns:
                break
            pairs.append((a, b))
    return pairs
