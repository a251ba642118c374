"""What the gate asks of the kernel: futexes on the shared mapping, and /proc.

The runtime wakes parked tenant threads and waits for drain acknowledgements
with raw futex calls on words of the gate file's mapping (ctypes syscall;
Python has no futex binding), and it judges whether a registered process is
still the one that registered from its /proc start time. Standard library only.
"""

from __future__ import annotations

import ctypes
import platform

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine(), 202)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def futex_wake_all(addr: int) -> None:
    _syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(_FUTEX_WAKE),
             ctypes.c_int(0x7FFFFFFF), None, None, ctypes.c_int(0))


def futex_wait(addr: int, expected: int, timeout_s: float) -> None:
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    _syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(_FUTEX_WAIT),
             ctypes.c_uint32(expected), ctypes.byref(ts), None, ctypes.c_int(0))


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


def start_time_of(pid: int) -> int:
    """The process's start time (/proc/<pid>/stat field 22, clock ticks); 0 when it is gone."""
    info = _proc_start_time(pid)
    return info[0] if info is not None else 0


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
