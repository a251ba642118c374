"""Python side of the KREX *simulated* CUDA driver (stdlib + ctypes only).

The simulator (native/src/simcuda*.c, built to native/build/sim/libcuda.so.1)
is a libcuda for machines without a GPU: kernels sleep for their simulated
duration on a device shared by every process of the machine. Its figures are
not GPU figures.

This module gives:

- ``SimCuda``: a small tenant-side driver client used by the demo and by test
  workloads. It loads ``libcuda.so.1`` with ``ctypes.CDLL`` and resolves
  symbols with ``dlsym`` like any CUDA program, so a preloaded interception
  library sees its calls. Every ``CUresult`` is checked.
- ``read_execution_log``: the execution log (``KREX_SIM_LOG``) as records.
- ``read_device`` / ``active_count`` / ``remove_device``: the shared device
  file, read directly (no driver needed).

The binary layouts below mirror ``native/include/krex_simcuda.h``; a test
compiles that header and compares sizes and offsets.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

# ---------------------------------------------------------------------------
# Contract with krex_simcuda.h
# ---------------------------------------------------------------------------

ENV_DEVICE = "KREX_SIM_DEVICE"
ENV_GPUS = "KREX_SIM_GPUS"
ENV_LOG = "KREX_SIM_LOG"
ENV_TENANT = "KREX_TENANT_ID"
ENV_MEM_MB = "KREX_SIM_MEM_MB"
ENV_COPY_MBPS = "KREX_SIM_COPY_MBPS"
DEFAULT_DEVICE_NAME = "default"
SHM_DIR = "/dev/shm"
SHM_FILE_PREFIX = "krex-sim-"

SHM_MAGIC = 0x314D49535845524B  # b"KREXSIM1" little-endian
SHM_VERSION = 1
MAX_DEVICES = 16
MAX_PROCS = 512

# struct krex_sim_shm header: magic, version, ready, num_devices, max_procs,
# copy_mbps, reserved0, reserved1[5]
SHM_HEADER = struct.Struct("<QIIIIII5Q")
# struct krex_sim_device_info: uuid[16], name[64], total_mem, reserved[5]
DEVICE_INFO = struct.Struct("<16s64sQ5Q")
# struct krex_sim_proc_slot
PROC_SLOT = struct.Struct(f"<iIQiIIIiI{MAX_DEVICES}I{MAX_DEVICES}Q24x")
PROC_SLOT_FIELDS = (
    "pid", "lock_word", "start_time", "locker_pid", "in_call", "inflight",
    "drain_seq", "tenant_id", "reserved0",
)
DEVICES_OFFSET = SHM_HEADER.size
PROCS_OFFSET = DEVICES_OFFSET + MAX_DEVICES * DEVICE_INFO.size
SHM_SIZE = PROCS_OFFSET + MAX_PROCS * PROC_SLOT.size

LOG_MAGIC = 0x474C534B  # b"KSLG" little-endian
LOG_VERSION = 1
LOG_NAME_LEN = 40
# struct krex_sim_log_record (packed, 128 bytes)
LOG_RECORD = struct.Struct(f"<IHHiiiiQQQQQ3I3I{LOG_NAME_LEN}s")
LOG_RECORD_FIELDS = (
    "magic", "version", "kind", "pid", "tenant_id", "device", "target_pid",
    "stream_id", "start_ns", "end_ns", "solo_ns", "bytes", "grid", "block", "name",
)

KIND_KERNEL = 1
KIND_MEMCPY_HTOD = 2
KIND_MEMCPY_DTOH = 3
KIND_MEMCPY_DTOD = 4
KIND_MEMSET = 5
KIND_LOCK = 6
KIND_UNLOCK = 7
KIND_LOCK_TIMEOUT = 8
KIND_HOST_FUNC = 9
KIND_NAMES = {
    KIND_KERNEL: "kernel", KIND_MEMCPY_HTOD: "memcpy_htod", KIND_MEMCPY_DTOH: "memcpy_dtoh",
    KIND_MEMCPY_DTOD: "memcpy_dtod", KIND_MEMSET: "memset", KIND_LOCK: "lock",
    KIND_UNLOCK: "unlock", KIND_LOCK_TIMEOUT: "lock_timeout", KIND_HOST_FUNC: "host_func",
}

# A few CUresult values and driver constants used here.
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_STATE = 401
CUDA_ERROR_TIMEOUT = 909
CUDA_ERROR_NOT_SUPPORTED = 801
CU_PROCESS_STATE_RUNNING = 0
CU_PROCESS_STATE_LOCKED = 1
CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1
CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2
CU_EVENT_DEFAULT = 0
CU_STREAM_NON_BLOCKING = 1


# ---------------------------------------------------------------------------
# Execution log
# ---------------------------------------------------------------------------

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


def read_execution_log(path: str | os.PathLike) -> list[Record]:
    """All records of an execution log, in file order (a missing file is empty)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    size = LOG_RECORD.size
    whole = len(data) - len(data) % size  # a writer may be mid-record only if it died
    return [parse_record(data[i:i + size]) for i in range(0, whole, size)]


# ---------------------------------------------------------------------------
# Shared device file
# ---------------------------------------------------------------------------

def device_path(name: str | None = None) -> str:
    name = name or os.environ.get(ENV_DEVICE) or DEFAULT_DEVICE_NAME
    return os.path.join(SHM_DIR, SHM_FILE_PREFIX + name)


def remove_device(name: str | None = None) -> bool:
    """Delete a shared simulated device. Processes still mapping it keep their
    copy; the next process creates a fresh one. Returns whether it existed."""
    try:
        os.unlink(device_path(name))
        return True
    except FileNotFoundError:
        return False


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


@dataclass(frozen=True)
class DeviceState:
    num_devices: int
    copy_mbps: int
    names: tuple[str, ...]
    uuids: tuple[str, ...]
    total_mem: tuple[int, ...]
    slots: tuple[ProcSlot, ...]  # claimed slots only

    def active(self, device: int = 0) -> int:
        """Items executing now on `device`, counting live processes only."""
        return sum(s.active[device] for s in self.slots if s.alive)


def _format_uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def read_device(name: str | None = None) -> DeviceState:
    """A snapshot of the shared device (raises FileNotFoundError if absent)."""
    with open(device_path(name), "rb") as f:
        data = f.read(SHM_SIZE)
    if len(data) < SHM_SIZE:
        raise ValueError("shared device file is not initialised")
    magic, version, ready, ndev, max_procs, copy_mbps, *_ = SHM_HEADER.unpack_from(data, 0)
    if magic != SHM_MAGIC or version != SHM_VERSION or not ready or max_procs != MAX_PROCS:
        raise ValueError(f"not a version {SHM_VERSION} simulated device")
    names, uuids, mems = [], [], []
    for d in range(ndev):
        uuid, dname, total, *_ = DEVICE_INFO.unpack_from(data, DEVICES_OFFSET + d * DEVICE_INFO.size)
        names.append(dname.rstrip(b"\0").decode())
        uuids.append(_format_uuid(uuid))
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
            active=tuple(v[9:9 + MAX_DEVICES]), mem_used=tuple(v[9 + MAX_DEVICES:]),
        ))
    return DeviceState(ndev, copy_mbps, tuple(names), tuple(uuids), tuple(mems), tuple(slots))


def active_count(name: str | None = None, device: int = 0) -> int:
    return read_device(name).active(device)


# ---------------------------------------------------------------------------
# Driver client
# ---------------------------------------------------------------------------

class CudaError(RuntimeError):
    """A driver call returned something other than CUDA_SUCCESS."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed: {name} ({code})")
        self.call = call
        self.code = code
        self.name = name


_c = ctypes
CUdeviceptr = _c.c_uint64
_HANDLE = _c.c_void_p
_PTR = _c.c_void_p


class CUlaunchConfig(_c.Structure):
    _fields_ = [
        ("gridDimX", _c.c_uint), ("gridDimY", _c.c_uint), ("gridDimZ", _c.c_uint),
        ("blockDimX", _c.c_uint), ("blockDimY", _c.c_uint), ("blockDimZ", _c.c_uint),
        ("sharedMemBytes", _c.c_uint), ("hStream", _HANDLE),
        ("attrs", _PTR), ("numAttrs", _c.c_uint),
    ]


class CUcheckpointLockArgs(_c.Structure):
    _fields_ = [("timeoutMs", _c.c_uint), ("reserved0", _c.c_uint), ("reserved1", _c.c_uint64 * 7)]


class CUcheckpointUnlockArgs(_c.Structure):
    _fields_ = [("reserved", _c.c_uint64 * 8)]


# name -> argtypes; versioned names are the ones cuda.h maps callers to
_SIGNATURES: dict[str, tuple] = {
    "cuInit": (_c.c_uint,),
    "cuDriverGetVersion": (_c.POINTER(_c.c_int),),
    "cuGetErrorName": (_c.c_int, _c.POINTER(_c.c_char_p)),
    "cuDeviceGet": (_c.POINTER(_c.c_int), _c.c_int),
    "cuDeviceGetCount": (_c.POINTER(_c.c_int),),
    "cuDeviceGetName": (_c.c_char_p, _c.c_int, _c.c_int),
    "cuDeviceGetUuid_v2": (_c.c_char_p, _c.c_int),
    "cuDeviceTotalMem_v2": (_c.POINTER(_c.c_size_t), _c.c_int),
    "cuDevicePrimaryCtxRetain": (_c.POINTER(_HANDLE), _c.c_int),
    "cuDevicePrimaryCtxRelease_v2": (_c.c_int,),
    "cuCtxSetCurrent": (_HANDLE,),
    "cuCtxGetCurrent": (_c.POINTER(_HANDLE),),
    "cuCtxCreate_v4": (_c.POINTER(_HANDLE), _PTR, _c.c_uint, _c.c_int),
    "cuCtxDestroy_v2": (_HANDLE,),
    "cuCtxPushCurrent_v2": (_HANDLE,),
    "cuCtxPopCurrent_v2": (_c.POINTER(_HANDLE),),
    "cuCtxGetDevice": (_c.POINTER(_c.c_int),),
    "cuCtxSynchronize": (),
    "cuCtxSynchronize_v2": (_HANDLE,),
    "cuModuleLoadData": (_c.POINTER(_HANDLE), _c.c_char_p),
    "cuModuleGetFunction": (_c.POINTER(_HANDLE), _HANDLE, _c.c_char_p),
    "cuMemAlloc_v2": (_c.POINTER(CUdeviceptr), _c.c_size_t),
    "cuMemFree_v2": (CUdeviceptr,),
    "cuMemGetInfo_v2": (_c.POINTER(_c.c_size_t), _c.POINTER(_c.c_size_t)),
    "cuMemcpyHtoD_v2": (CUdeviceptr, _PTR, _c.c_size_t),
    "cuMemcpyDtoH_v2": (_PTR, CUdeviceptr, _c.c_size_t),
    "cuMemcpyDtoD_v2": (CUdeviceptr, CUdeviceptr, _c.c_size_t),
    "cuMemcpyHtoDAsync_v2": (CUdeviceptr, _PTR, _c.c_size_t, _HANDLE),
    "cuMemcpyDtoHAsync_v2": (_PTR, CUdeviceptr, _c.c_size_t, _HANDLE),
    "cuMemsetD8_v2": (CUdeviceptr, _c.c_ubyte, _c.c_size_t),
    "cuMemsetD32_v2": (CUdeviceptr, _c.c_uint, _c.c_size_t),
    "cuMemsetD32Async": (CUdeviceptr, _c.c_uint, _c.c_size_t, _HANDLE),
    "cuLaunchKernel": (_HANDLE, _c.c_uint, _c.c_uint, _c.c_uint, _c.c_uint, _c.c_uint, _c.c_uint,
                       _c.c_uint, _HANDLE, _c.POINTER(_PTR), _c.POINTER(_PTR)),
    "cuLaunchKernelEx": (_c.POINTER(CUlaunchConfig), _HANDLE, _c.POINTER(_PTR), _c.POINTER(_PTR)),
    "cuStreamCreate": (_c.POINTER(_HANDLE), _c.c_uint),
    "cuStreamDestroy_v2": (_HANDLE,),
    "cuStreamSynchronize": (_HANDLE,),
    "cuStreamQuery": (_HANDLE,),
    "cuStreamWaitEvent": (_HANDLE, _HANDLE, _c.c_uint),
    "cuEventCreate": (_c.POINTER(_HANDLE), _c.c_uint),
    "cuEventRecord": (_HANDLE, _HANDLE),
    "cuEventSynchronize": (_HANDLE,),
    "cuEventQuery": (_HANDLE,),
    "cuEventElapsedTime_v2": (_c.POINTER(_c.c_float), _HANDLE, _HANDLE),
    "cuEventDestroy_v2": (_HANDLE,),
    "cuGetProcAddress_v2": (_c.c_char_p, _c.POINTER(_PTR), _c.c_int, _c.c_uint64, _c.POINTER(_c.c_int)),
    "cuCheckpointProcessLock": (_c.c_int, _c.POINTER(CUcheckpointLockArgs)),
    "cuCheckpointProcessUnlock": (_c.c_int, _c.POINTER(CUcheckpointUnlockArgs)),
    "cuCheckpointProcessGetState": (_c.c_int, _c.POINTER(_c.c_int)),
}


class Driver:
    """ctypes bindings of libcuda.so.1; calls raise CudaError on failure."""

    def __init__(self, library: str = "libcuda.so.1"):
        self.lib = _c.CDLL(library)
        self._fns: dict[str, object] = {}

    def fn(self, name: str):
        f = self._fns.get(name)
        if f is None:
            f = getattr(self.lib, name)  # dlsym: an interposer sees this lookup
            f.restype = _c.c_int
            f.argtypes = _SIGNATURES[name]
            self._fns[name] = f
        return f

    def error_name(self, code: int) -> str:
        s = _c.c_char_p()
        if self.fn("cuGetErrorName")(code, _c.byref(s)) == CUDA_SUCCESS and s.value:
            return s.value.decode()
        return f"CUresult {code}"

    def raw(self, name: str, *args) -> int:
        """Call without checking; returns the CUresult."""
        return self.fn(name)(*args)

    def __call__(self, name: str, *args) -> None:
        rc = self.fn(name)(*args)
        if rc != CUDA_SUCCESS:
            raise CudaError(name, rc, self.error_name(rc))


class SimCuda:
    """One tenant's view of a (simulated) device: primary context, one module.

    Kernels follow the simulator's convention: argument 0 is the solo
    duration in ns, argument 1 an optional device counter incremented on
    completion. `stream=None` is the default stream.
    """

    def __init__(self, device: int = 0, library: str = "libcuda.so.1"):
        self.drv = Driver(library)
        self.drv("cuInit", 0)
        dev = _c.c_int()
        self.drv("cuDeviceGet", _c.byref(dev), device)
        self.device = dev.value
        ctx = _HANDLE()
        self.drv("cuDevicePrimaryCtxRetain", _c.byref(ctx), self.device)
        self.ctx = ctx
        self.drv("cuCtxSetCurrent", ctx)
        module = _HANDLE()
        self.drv("cuModuleLoadData", _c.byref(module), b"krex simulated module")
        self.module = module
        self._functions: dict[str, _HANDLE] = {}

    # -- context / device ------------------------------------------------
    def make_current(self) -> None:
        """Bind the context to the calling thread (each thread needs it once)."""
        self.drv("cuCtxSetCurrent", self.ctx)

    def device_name(self) -> str:
        buf = _c.create_string_buffer(128)
        self.drv("cuDeviceGetName", buf, len(buf), self.device)
        return buf.value.decode()

    def device_uuid(self) -> str:
        buf = _c.create_string_buffer(16)
        self.drv("cuDeviceGetUuid_v2", buf, self.device)
        return _format_uuid(buf.raw)

    def device_count(self) -> int:
        n = _c.c_int()
        self.drv("cuDeviceGetCount", _c.byref(n))
        return n.value

    def driver_version(self) -> int:
        v = _c.c_int()
        self.drv("cuDriverGetVersion", _c.byref(v))
        return v.value

    def mem_info(self) -> tuple[int, int]:
        free, total = _c.c_size_t(), _c.c_size_t()
        self.drv("cuMemGetInfo_v2", _c.byref(free), _c.byref(total))
        return free.value, total.value

    def synchronize(self) -> None:
        self.drv("cuCtxSynchronize")

    def close(self) -> None:
        self.synchronize()
        self.drv("cuDevicePrimaryCtxRelease_v2", self.device)

    # -- kernels -----------------------------------------------------------
    def function(self, name: str = "sim_kernel") -> _HANDLE:
        f = self._functions.get(name)
        if f is None:
            f = _HANDLE()
            self.drv("cuModuleGetFunction", _c.byref(f), self.module, name.encode())
            self._functions[name] = f
        return f

    @staticmethod
    def _params(duration_ns: int, counter: int | None):
        duration = _c.c_uint64(int(duration_ns))
        counter_ptr = CUdeviceptr(counter or 0)
        params = (_PTR * 2)(_c.cast(_c.byref(duration), _PTR), _c.cast(_c.byref(counter_ptr), _PTR))
        return params, (duration, counter_ptr)  # keep the values alive during the call

    def launch(self, duration_ns: int, stream=None, counter: int | None = None, name: str = "sim_kernel",
               grid: Sequence[int] = (1, 1, 1), block: Sequence[int] = (1, 1, 1)) -> None:
        params, _keep = self._params(duration_ns, counter)
        self.drv("cuLaunchKernel", self.function(name), *grid, *block, 0, stream, params, None)

    def launch_ex(self, duration_ns: int, stream=None, counter: int | None = None, name: str = "sim_kernel",
                  grid: Sequence[int] = (1, 1, 1), block: Sequence[int] = (1, 1, 1)) -> None:
        params, _keep = self._params(duration_ns, counter)
        cfg = CUlaunchConfig(*grid, *block, 0, stream, None, 0)
        self.drv("cuLaunchKernelEx", _c.byref(cfg), self.function(name), params, None)

    # -- streams and events ----------------------------------------------------
    def stream(self, flags: int = 0) -> _HANDLE:
        s = _HANDLE()
        self.drv("cuStreamCreate", _c.byref(s), flags)
        return s

    def destroy_stream(self, stream) -> None:
        self.drv("cuStreamDestroy_v2", stream)

    def stream_synchronize(self, stream=None) -> None:
        self.drv("cuStreamSynchronize", stream)

    def stream_done(self, stream=None) -> bool:
        rc = self.drv.raw("cuStreamQuery", stream)
        if rc in (CUDA_SUCCESS, CUDA_ERROR_NOT_READY):
            return rc == CUDA_SUCCESS
        raise CudaError("cuStreamQuery", rc, self.drv.error_name(rc))

    def event(self, flags: int = CU_EVENT_DEFAULT) -> _HANDLE:
        e = _HANDLE()
        self.drv("cuEventCreate", _c.byref(e), flags)
        return e

    def record(self, event, stream=None) -> None:
        self.drv("cuEventRecord", event, stream)

    def wait_event(self, stream, event) -> None:
        self.drv("cuStreamWaitEvent", stream, event, 0)

    def event_synchronize(self, event) -> None:
        self.drv("cuEventSynchronize", event)

    def elapsed_ms(self, start, end) -> float:
        ms = _c.c_float()
        self.drv("cuEventElapsedTime_v2", _c.byref(ms), start, end)
        return ms.value

    def destroy_event(self, event) -> None:
        self.drv("cuEventDestroy_v2", event)

    def time_kernel(self, duration_ns: int, repeats: int = 5, stream=None, name: str = "sim_kernel") -> list[float]:
        """Event-timed launches, one at a time: milliseconds per launch."""
        start, end = self.event(), self.event()
        times = []
        try:
            for _ in range(repeats):
                self.record(start, stream)
                self.launch(duration_ns, stream=stream, name=name)
                self.record(end, stream)
                self.event_synchronize(end)
                times.append(self.elapsed_ms(start, end))
        finally:
            self.destroy_event(start)
            self.destroy_event(end)
        return times

    # -- memory -------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        p = CUdeviceptr()
        self.drv("cuMemAlloc_v2", _c.byref(p), nbytes)
        return p.value

    def free(self, ptr: int) -> None:
        self.drv("cuMemFree_v2", ptr)

    def copy_htod(self, dst: int, data: bytes, stream=None, asynchronous: bool = False) -> None:
        buf = _c.create_string_buffer(bytes(data), len(data))
        if asynchronous:
            self.drv("cuMemcpyHtoDAsync_v2", dst, buf, len(data), stream)
            self.stream_synchronize(stream)  # the host buffer dies with this call
        else:
            self.drv("cuMemcpyHtoD_v2", dst, buf, len(data))

    def copy_dtoh(self, src: int, nbytes: int) -> bytes:
        buf = _c.create_string_buffer(nbytes)
        self.drv("cuMemcpyDtoH_v2", buf, src, nbytes)
        return buf.raw

    def copy_dtod(self, dst: int, src: int, nbytes: int) -> None:
        self.drv("cuMemcpyDtoD_v2", dst, src, nbytes)

    def memset_d8(self, dst: int, value: int, count: int) -> None:
        self.drv("cuMemsetD8_v2", dst, value, count)

    def memset_d32(self, dst: int, value: int, count: int, stream=None, asynchronous: bool = False) -> None:
        if asynchronous:
            self.drv("cuMemsetD32Async", dst, value, count, stream)
        else:
            self.drv("cuMemsetD32_v2", dst, value, count)

    def counter(self) -> int:
        """A zeroed device uint64 to pass as a kernel's completion counter."""
        p = self.alloc(8)
        self.memset_d8(p, 0, 8)
        return p

    def read_u64(self, ptr: int) -> int:
        return struct.unpack("<Q", self.copy_dtoh(ptr, 8))[0]

    # -- entry points ----------------------------------------------------------------
    def proc_address(self, symbol: str, version: int = 13000, flags: int = 0) -> int:
        """cuGetProcAddress_v2; returns the function address."""
        p, status = _PTR(), _c.c_int()
        self.drv("cuGetProcAddress_v2", symbol.encode(), _c.byref(p), version, flags, _c.byref(status))
        return p.value or 0


# ---------------------------------------------------------------------------
# Checkpoint lock (what the runtime's driver-lock backend calls)
# ---------------------------------------------------------------------------

def checkpoint_lock(pid: int, timeout_ms: int = 0, driver: Driver | None = None) -> None:
    args = CUcheckpointLockArgs(timeout_ms)
    (driver or Driver())("cuCheckpointProcessLock", pid, _c.byref(args))


def checkpoint_unlock(pid: int, driver: Driver | None = None) -> None:
    (driver or Driver())("cuCheckpointProcessUnlock", pid, _c.byref(CUcheckpointUnlockArgs()))


def checkpoint_state(pid: int, driver: Driver | None = None) -> int:
    state = _c.c_int()
    (driver or Driver())("cuCheckpointProcessGetState", pid, _c.byref(state))
    return state.value


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
