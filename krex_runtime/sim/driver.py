"""ctypes bindings of libcuda.so.1 as the simulator implements it.

The argument types of every driver call the bindings make, a ``Driver`` that
resolves them with dlsym (so a preloaded interception library sees each
lookup) and raises ``CudaError`` on failure, and the checkpoint lock calls the
runtime's driver-lock backend makes on another process.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from krex_runtime.sim.layout import CUDA_SUCCESS


class CudaError(RuntimeError):
    """A driver call returned something other than CUDA_SUCCESS."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed: {name} ({code})")
        self.call = call
        self.code = code
        self.name = name


_c = ctypes
CUdeviceptr = _c.c_uint64
HANDLE = _c.c_void_p
PTR = _c.c_void_p


class CUlaunchConfig(_c.Structure):
    _fields_ = (
        ("gridDimX", _c.c_uint), ("gridDimY", _c.c_uint), ("gridDimZ", _c.c_uint),
        ("blockDimX", _c.c_uint), ("blockDimY", _c.c_uint), ("blockDimZ", _c.c_uint),
        ("sharedMemBytes", _c.c_uint), ("hStream", HANDLE),
        ("attrs", PTR), ("numAttrs", _c.c_uint),
    )


class CUcheckpointLockArgs(_c.Structure):
    _fields_ = (("timeoutMs", _c.c_uint), ("reserved0", _c.c_uint), ("reserved1", _c.c_uint64 * 7))


class CUcheckpointUnlockArgs(_c.Structure):
    _fields_ = (("reserved", _c.c_uint64 * 8),)


# name -> argtypes; versioned names are the ones cuda.h maps callers to
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (_c.c_uint,),
    "cuDriverGetVersion": (_c.POINTER(_c.c_int),),
    "cuGetErrorName": (_c.c_int, _c.POINTER(_c.c_char_p)),
    "cuDeviceGet": (_c.POINTER(_c.c_int), _c.c_int),
    "cuDeviceGetCount": (_c.POINTER(_c.c_int),),
    "cuDeviceGetName": (_c.c_char_p, _c.c_int, _c.c_int),
    "cuDeviceGetUuid_v2": (_c.c_char_p, _c.c_int),
    "cuDeviceTotalMem_v2": (_c.POINTER(_c.c_size_t), _c.c_int),
    "cuDevicePrimaryCtxRetain": (_c.POINTER(HANDLE), _c.c_int),
    "cuDevicePrimaryCtxRelease_v2": (_c.c_int,),
    "cuCtxSetCurrent": (HANDLE,),
    "cuCtxGetCurrent": (_c.POINTER(HANDLE),),
    "cuCtxCreate_v4": (_c.POINTER(HANDLE), PTR, _c.c_uint, _c.c_int),
    "cuCtxDestroy_v2": (HANDLE,),
    "cuCtxPushCurrent_v2": (HANDLE,),
    "cuCtxPopCurrent_v2": (_c.POINTER(HANDLE),),
    "cuCtxGetDevice": (_c.POINTER(_c.c_int),),
    "cuCtxSynchronize": (),
    "cuCtxSynchronize_v2": (HANDLE,),
    "cuModuleLoadData": (_c.POINTER(HANDLE), _c.c_char_p),
    "cuModuleGetFunction": (_c.POINTER(HANDLE), HANDLE, _c.c_char_p),
    "cuMemAlloc_v2": (_c.POINTER(CUdeviceptr), _c.c_size_t),
    "cuMemFree_v2": (CUdeviceptr,),
    "cuMemGetInfo_v2": (_c.POINTER(_c.c_size_t), _c.POINTER(_c.c_size_t)),
    "cuMemcpyHtoD_v2": (CUdeviceptr, PTR, _c.c_size_t),
    "cuMemcpyDtoH_v2": (PTR, CUdeviceptr, _c.c_size_t),
    "cuMemcpyDtoD_v2": (CUdeviceptr, CUdeviceptr, _c.c_size_t),
    "cuMemcpyHtoDAsync_v2": (CUdeviceptr, PTR, _c.c_size_t, HANDLE),
    "cuMemcpyDtoHAsync_v2": (PTR, CUdeviceptr, _c.c_size_t, HANDLE),
    "cuMemsetD8_v2": (CUdeviceptr, _c.c_ubyte, _c.c_size_t),
    "cuMemsetD32_v2": (CUdeviceptr, _c.c_uint, _c.c_size_t),
    "cuMemsetD32Async": (CUdeviceptr, _c.c_uint, _c.c_size_t, HANDLE),
    "cuLaunchKernel": (HANDLE, _c.c_uint, _c.c_uint, _c.c_uint, _c.c_uint, _c.c_uint, _c.c_uint,
                       _c.c_uint, HANDLE, _c.POINTER(PTR), _c.POINTER(PTR)),
    "cuLaunchKernelEx": (_c.POINTER(CUlaunchConfig), HANDLE, _c.POINTER(PTR), _c.POINTER(PTR)),
    "cuStreamCreate": (_c.POINTER(HANDLE), _c.c_uint),
    "cuStreamDestroy_v2": (HANDLE,),
    "cuStreamSynchronize": (HANDLE,),
    "cuStreamQuery": (HANDLE,),
    "cuStreamWaitEvent": (HANDLE, HANDLE, _c.c_uint),
    "cuEventCreate": (_c.POINTER(HANDLE), _c.c_uint),
    "cuEventRecord": (HANDLE, HANDLE),
    "cuEventSynchronize": (HANDLE,),
    "cuEventQuery": (HANDLE,),
    "cuEventElapsedTime_v2": (_c.POINTER(_c.c_float), HANDLE, HANDLE),
    "cuEventDestroy_v2": (HANDLE,),
    "cuGetProcAddress_v2": (_c.c_char_p, _c.POINTER(PTR), _c.c_int, _c.c_uint64, _c.POINTER(_c.c_int)),
    "cuCheckpointProcessLock": (_c.c_int, _c.POINTER(CUcheckpointLockArgs)),
    "cuCheckpointProcessUnlock": (_c.c_int, _c.POINTER(CUcheckpointUnlockArgs)),
    "cuCheckpointProcessGetState": (_c.c_int, _c.POINTER(_c.c_int)),
}


def bound(lib: _c.CDLL, cache: dict[str, Callable[..., int]], signatures: dict[str, tuple[Any, ...]],
          name: str) -> Callable[..., int]:
    """`name` of `lib` with its signature, looked up once (dlsym: an interposer
    sees this lookup)."""
    f = cache.get(name)
    if f is None:
        function = getattr(lib, name)
        function.restype = _c.c_int
        function.argtypes = signatures[name]
        cache[name] = f = function
    return f


class Driver:
    """ctypes bindings of libcuda.so.1; calls raise CudaError on failure."""

    def __init__(self, library: str = "libcuda.so.1"):
        self.lib = _c.CDLL(library)
        self._fns: dict[str, Callable[..., int]] = {}

    def fn(self, name: str) -> Callable[..., int]:
        return bound(self.lib, self._fns, SIGNATURES, name)

    def error_name(self, code: int) -> str:
        s = _c.c_char_p()
        if self.fn("cuGetErrorName")(code, _c.byref(s)) == CUDA_SUCCESS and s.value:
            return s.value.decode()
        return f"CUresult {code}"

    def raw(self, name: str, *args: Any) -> int:
        """Call without checking; returns the CUresult."""
        return self.fn(name)(*args)

    def __call__(self, name: str, *args: Any) -> None:
        rc = self.fn(name)(*args)
        if rc != CUDA_SUCCESS:
            raise CudaError(name, rc, self.error_name(rc))


# The checkpoint lock: what the runtime's driver-lock backend calls on a tenant.


def checkpoint_lock(pid: int, timeout_ms: int = 0, driver: Driver | None = None) -> None:
    args = CUcheckpointLockArgs(timeout_ms)
    (driver or Driver())("cuCheckpointProcessLock", pid, _c.byref(args))


def checkpoint_unlock(pid: int, driver: Driver | None = None) -> None:
    (driver or Driver())("cuCheckpointProcessUnlock", pid, _c.byref(CUcheckpointUnlockArgs()))


def checkpoint_state(pid: int, driver: Driver | None = None) -> int:
    state = _c.c_int()
    (driver or Driver())("cuCheckpointProcessGetState", pid, _c.byref(state))
    return state.value
