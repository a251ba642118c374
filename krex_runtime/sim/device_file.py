"""The shared simulated device file (/dev/shm/krex-sim-<name>), read directly.

Finding, snapshotting and removing a simulated device needs no driver: the
runtime's GPU metrics, the test hygiene checks and the benchmarks read the
file as the simulator lays it out and apply the driver's liveness rule.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from krex_runtime.sim.heat import DeviceLoad
from krex_runtime.sim.layout import (
    DEFAULT_DEVICE_NAME,
    DEVICE_INFO,
    DEVICE_LOAD,
    DEVICES_OFFSET,
    ENV_DEVICE,
    LOAD_OFFSET,
    MAX_DEVICES,
    MAX_PROCS,
    PROC_SLOT,
    PROCS_OFFSET,
    REAPED,
    REAPED_MAX,
    REAPED_OFFSET,
    REAPED_SEQ_OFFSET,
    SHM_DIR,
    SHM_FILE_PREFIX,
    SHM_HEADER,
    SHM_MAGIC,
    SHM_SIZE,
    SHM_VERSION,
)


def device_path(name: str | None = None) -> str:
    name = name or os.environ.get(ENV_DEVICE) or DEFAULT_DEVICE_NAME
    return os.path.join(SHM_DIR, SHM_FILE_PREFIX + name)


def claim_path(name: str) -> str:
    """The lock a runtime holds while it serves the simulated device `name`."""
    return device_path(name) + ".runtime"


def remove_device(name: str | None = None) -> bool:
    """Delete a shared simulated device. Processes still mapping it keep their
    copy; the next process creates a fresh one. Returns whether it existed."""
    try:
        os.unlink(device_path(name))
        return True
    except FileNotFoundError:
        return False


def fresh_device(name: str, group: int | None) -> None:
    """Give a runtime a simulated device of its own: what an earlier run (or a
    killed runtime) left under this name goes, and the first tenant's
    simulated driver lays out a fresh one in the empty file made here. Its
    slots, counters and execution history are therefore this runtime's alone
    (processes still mapping the old file keep that copy). The file is the
    runtime's, closed to everyone but the tenants' `group` when they run as
    other users (None: they run as the runtime's user). Call it while holding
    the device's claim, so no other runtime serves it meanwhile."""
    path = device_path(name)
    remove_device(name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        if group is not None:
            os.fchown(fd, -1, group)
            os.fchmod(fd, 0o660)
    finally:
        os.close(fd)


def _pid_alive(pid: int, start_time: int) -> bool:
    """Same rule as the driver: dead, zombie or reused pids do not count."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return False
    return not (start_time and int(fields[19]) != start_time)


@dataclass(frozen=True)
class ProcSlot:
    pid: int
    alive: bool
    locked: bool
    locker_pid: int
    in_call: int
    inflight: int
    tenant_id: int
    active: tuple[int, ...]
    mem_used: tuple[int, ...]
    devices_used: int = 0  # bit d: it executed work on device d
    work_items: tuple[int, ...] = ()  # items it started, per device
    last_work_ns: int = 0  # CLOCK_MONOTONIC of its latest item's start
    start_time: int = 0  # its owner's start time (/proc/<pid>/stat field 22)


@dataclass(frozen=True)
class Reaped:
    """A slot the driver took back from a dead owner, as it was (krex_sim_reaped)."""

    seq: int  # n + 1 for the n-th reaped slot
    pid: int
    tenant_id: int
    start_time: int
    last_work_ns: int
    devices_used: int
    work_items: tuple[int, ...]


@dataclass(frozen=True)
class DeviceState:
    num_devices: int
    copy_mbps: int
    names: tuple[str, ...]
    uuids: tuple[str, ...]
    total_mem: tuple[int, ...]
    slots: tuple[ProcSlot, ...]  # claimed slots only
    heat: bool = False  # the heat model is on (KREX_SIM_HEAT): the SM clock falls as the device heats
    loads: tuple[DeviceLoad, ...] = ()  # per device: busy time and heat (sim/heat.py)
    reaped_seq: int = 0  # slots reaped so far with work done
    reaped: tuple[Reaped, ...] = ()  # the last REAPED_MAX of them, whole records only, oldest first

    def active(self, device: int = 0) -> int:
        """Items executing now on `device`, counting live processes only."""
        return sum(s.active[device] for s in self.slots if s.alive)

    def mem_used(self, device: int = 0) -> int:
        """What the live processes hold allocated on `device`."""
        return sum(s.mem_used[device] for s in self.slots if s.alive)


def format_uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def read_device(name: str | None = None) -> DeviceState:
    """A snapshot of the shared device. FileNotFoundError where nobody has
    used it yet: no file, or the empty one a runtime made for its first
    tenant to lay out (fresh_device)."""
    for _ in range(LOAD_READS):
        with open(device_path(name), "rb") as f:
            data = f.read(SHM_SIZE)
        if not data:
            raise FileNotFoundError(f"simulated device {device_path(name)} is not laid out yet: nobody has used it")
        if len(data) < SHM_SIZE:
            raise ValueError("shared device file is not initialised")
        loads = _loads(data)
        if loads is not None:
            break
    magic, version, ready, ndev, max_procs, copy_mbps, heat, *_ = SHM_HEADER.unpack_from(data, 0)
    if magic != SHM_MAGIC or version != SHM_VERSION or not ready or max_procs != MAX_PROCS:
        raise ValueError(f"not a version {SHM_VERSION} simulated device")
    names, uuids, mems = [], [], []
    for d in range(ndev):
        uuid, dname, total, *_ = DEVICE_INFO.unpack_from(data, DEVICES_OFFSET + d * DEVICE_INFO.size)
        names.append(dname.rstrip(b"\0").decode())
        uuids.append(format_uuid(uuid))
        mems.append(total)
    slots = []
    for i in range(MAX_PROCS):
        v = PROC_SLOT.unpack_from(data, PROCS_OFFSET + i * PROC_SLOT.size)
        pid, lock_word, start_time, locker, in_call, inflight, _seq, tenant, _r = v[:9]
        if pid <= 0:
            continue
        slots.append(ProcSlot(
            pid=pid, alive=_pid_alive(pid, start_time), locked=bool(lock_word),
            locker_pid=locker, in_call=in_call, inflight=inflight, tenant_id=tenant,
            active=tuple(v[9:9 + MAX_DEVICES]), mem_used=tuple(v[9 + MAX_DEVICES:9 + 2 * MAX_DEVICES]),
            devices_used=v[9 + 2 * MAX_DEVICES], last_work_ns=v[11 + 2 * MAX_DEVICES],
            work_items=tuple(v[12 + 2 * MAX_DEVICES:12 + 3 * MAX_DEVICES]), start_time=start_time,
        ))
    (reaped_seq,) = struct.unpack_from("<Q", data, REAPED_SEQ_OFFSET)
    reaped = []
    for i in range(REAPED_MAX):
        seq, rpid, tenant, start, last, used, _r, *items = REAPED.unpack_from(data, REAPED_OFFSET + i * REAPED.size)
        if seq:  # 0: never written, or being written now
            reaped.append(Reaped(seq, rpid, tenant, start, last, used, tuple(items)))
    return DeviceState(ndev, copy_mbps, tuple(names), tuple(uuids), tuple(mems), tuple(slots), bool(heat),
                       loads[:ndev] if loads is not None else (), reaped_seq,
                       tuple(sorted(reaped, key=lambda r: r.seq)))


LOAD_READS = 3  # a step published while the file was read: read again, this many times at most


def _loads(data: bytes) -> tuple[DeviceLoad, ...] | None:
    """Every device's load, or None where a step was being published while
    the file was read (its seqlock's two ends differ: krex_simcuda.h)."""
    loads = []
    for d in range(MAX_DEVICES):
        seq_start, _lock, busy, heat_ns, heat_busy, temp_mc, mhz, *_, seq_end = DEVICE_LOAD.unpack_from(
            data, LOAD_OFFSET + d * DEVICE_LOAD.size)
        if seq_start != seq_end:
            return None
        loads.append(DeviceLoad(busy, heat_ns, heat_busy, temp_mc / 1000, mhz or DeviceLoad.sm_clock_mhz))
    return tuple(loads)


def active_count(name: str | None = None, device: int = 0) -> int:
    return read_device(name).active(device)
