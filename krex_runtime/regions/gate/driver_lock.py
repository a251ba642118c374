"""The driver's process checkpoint lock, called from the runtime through ctypes.

`cuCheckpointProcessLock(pid)` blocks every further CUDA call of that process
and returns once its submitted work has finished; `Unlock` lets it go on
(driver >= 570; the simulated driver implements both). Never lock or unlock a
stopped process: on a real driver that hangs, whatever the timeout.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_TIMEOUT = 909


class _LockArgs(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


class _UnlockArgs(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_uint64 * 8)]


class CheckpointUnavailable(Exception):
    pass


class CheckpointDriver:
    def __init__(self, library: str | Path = "libcuda.so.1") -> None:
        try:
            self._lib = ctypes.CDLL(str(library))
            self._lock = self._lib.cuCheckpointProcessLock
            self._unlock = self._lib.cuCheckpointProcessUnlock
        except (OSError, AttributeError) as exc:
            raise CheckpointUnavailable(f"the CUDA driver has no process checkpoint lock ({exc})") from None
        self._lock.argtypes = [ctypes.c_int, ctypes.POINTER(_LockArgs)]
        self._unlock.argtypes = [ctypes.c_int, ctypes.POINTER(_UnlockArgs)]
        rc = self._lib.cuInit(0)
        if rc != CUDA_SUCCESS:
            raise CheckpointUnavailable(f"cuInit failed with CUresult {rc}")

    def lock(self, pid: int, timeout_s: float) -> int:
        """CUresult of locking `pid`, waiting at most `timeout_s` for its work."""
        args = _LockArgs(timeoutMs=max(1, int(timeout_s * 1000)))
        return int(self._lock(pid, ctypes.byref(args)))

    def unlock(self, pid: int) -> int:
        return int(self._unlock(pid, ctypes.byref(_UnlockArgs())))


def load(simulated_driver_dir: Path | None) -> CheckpointDriver:
    """The simulated driver on simulated GPUs (its shared device is chosen by
    KREX_SIM_DEVICE, which the caller sets), else the system's."""
    if simulated_driver_dir is not None:
        return CheckpointDriver(simulated_driver_dir / "libcuda.so.1")
    return CheckpointDriver(os.environ.get("KREX_CUDA_DRIVER", "libcuda.so.1"))
