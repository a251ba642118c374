"""The tenant-side client of the KREX *simulated* HIP runtime (stdlib + ctypes only).

The simulated HIP runtime (native/src/simhip/, built to
native/build/sim/libamdhip64.so.5) is HIP over the simulated CUDA driver, for
machines without an AMD GPU; its figures are not GPU figures. ``SimHip`` is
``SimCuda``'s counterpart for the AMD tenants of tests, the demo and
benchmarks: it loads ``libamdhip64.so.5`` with ``ctypes.CDLL`` and resolves
symbols with ``dlsym`` like any HIP program (PyTorch on ROCm, Triton's HIP
backend), so the preloaded HIP interception library sees its calls. Every
``hipError_t`` is checked.

``sim_gpu()`` picks the client of the tenant's GPU: ``SimHip`` when the
runtime said the GPU is AMD's (KREX_GPU_VENDOR=amd), else ``SimCuda``.
"""

from __future__ import annotations

import ctypes as _c
import os
from collections.abc import Callable, Sequence
from typing import Any

from krex_runtime.sim.driver import bound
from krex_runtime.sim.simcuda import SimCuda

HIP_SUCCESS = 0
HIP_ERROR_NOT_READY = 600
HIP_MEMCPY_HOST_TO_DEVICE = 1
HIP_MEMCPY_DEVICE_TO_HOST = 2
HANDLE = _c.c_void_p
PTR = _c.c_void_p
VENDOR_ENV = "KREX_GPU_VENDOR"  # krex_runtime/tenant/env.py GPU_VENDOR, set by the runtime for every tenant


class HipError(RuntimeError):
    """A HIP call returned something other than hipSuccess."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed: {name} ({code})")
        self.call, self.code, self.name = call, code, name


class Dim3(_c.Structure):
    _fields_ = [("x", _c.c_uint32), ("y", _c.c_uint32), ("z", _c.c_uint32)]


_u = _c.c_uint
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "hipInit": (_u,),
    "hipSetDevice": (_c.c_int,),
    "hipGetDeviceCount": (_c.POINTER(_c.c_int),),
    "hipDeviceSynchronize": (),
    "hipModuleLoadData": (_c.POINTER(HANDLE), _c.c_char_p),
    "hipModuleGetFunction": (_c.POINTER(HANDLE), HANDLE, _c.c_char_p),
    "hipModuleLaunchKernel": (HANDLE, _u, _u, _u, _u, _u, _u, _u, HANDLE, _c.POINTER(PTR), _c.POINTER(PTR)),
    "hipLaunchKernel": (PTR, Dim3, Dim3, _c.POINTER(PTR), _c.c_size_t, HANDLE),
    "hipStreamCreateWithFlags": (_c.POINTER(HANDLE), _u),
    "hipStreamDestroy": (HANDLE,),
    "hipStreamSynchronize": (HANDLE,),
    "hipStreamQuery": (HANDLE,),
    "hipStreamWaitEvent": (HANDLE, HANDLE, _u),
    "hipEventCreateWithFlags": (_c.POINTER(HANDLE), _u),
    "hipEventRecord": (HANDLE, HANDLE),
    "hipEventSynchronize": (HANDLE,),
    "hipEventElapsedTime": (_c.POINTER(_c.c_float), HANDLE, HANDLE),
    "hipEventDestroy": (HANDLE,),
    "hipMalloc": (_c.POINTER(PTR), _c.c_size_t),
    "hipFree": (PTR,),
    "hipMemcpy": (PTR, PTR, _c.c_size_t, _c.c_int),
    "hipMemset": (PTR, _c.c_int, _c.c_size_t),
}


class SimHip:
    """One tenant's view of a (simulated) AMD device: its current device, one module.

    The same kernel convention and methods as SimCuda (the ones tenants use),
    so a workload runs on either vendor's simulated GPU unchanged.
    """

    def __init__(self, device: int = 0, library: str = "libamdhip64.so.5"):
        self.lib = _c.CDLL(library)
        self._fns: dict[str, Callable[..., int]] = {}
        self.device = device
        self("hipInit", 0)
        self("hipSetDevice", device)
        module = HANDLE()
        self("hipModuleLoadData", _c.byref(module), b"krex simulated module")
        self.module = module
        self._functions: dict[str, HANDLE] = {}

    def _fn(self, name: str) -> Callable[..., int]:
        return bound(self.lib, self._fns, SIGNATURES, name)

    def raw(self, name: str, *args: Any) -> int:
        return self._fn(name)(*args)

    def __call__(self, name: str, *args: Any) -> None:
        rc = self._fn(name)(*args)
        if rc != HIP_SUCCESS:
            raise HipError(name, rc, self.error_name(rc))

    def error_name(self, code: int) -> str:
        f = self.lib.hipGetErrorName
        f.restype, f.argtypes = _c.c_char_p, (_c.c_int,)
        return (f(code) or b"hipError").decode()

    # -- device --------------------------------------------------------------
    def make_current(self) -> None:
        """Select the device on the calling thread (HIP's current device is per thread)."""
        self("hipSetDevice", self.device)

    def device_count(self) -> int:
        n = _c.c_int()
        self("hipGetDeviceCount", _c.byref(n))
        return n.value

    def synchronize(self) -> None:
        self("hipDeviceSynchronize")

    def close(self) -> None:
        self.synchronize()

    # -- kernels ----------------------------------------------------------------
    def function(self, name: str = "sim_kernel") -> HANDLE:
        f = self._functions.get(name)
        if f is None:
            f = HANDLE()
            self("hipModuleGetFunction", _c.byref(f), self.module, name.encode())
            self._functions[name] = f
        return f

    def launch(self, duration_ns: int, stream: HANDLE | None = None, counter: int | None = None, name: str = "sim_kernel",
               grid: Sequence[int] = (1, 1, 1), block: Sequence[int] = (1, 1, 1)) -> None:
        params, _keep = SimCuda._params(duration_ns, counter)
        self("hipModuleLaunchKernel", self.function(name), *grid, *block, 0, stream, params, None)

    def launch_by_address(self, duration_ns: int, address: int, stream: HANDLE | None = None) -> None:
        """hipLaunchKernel: a kernel named by its host address (what hipcc's launches become)."""
        params, _keep = SimCuda._params(duration_ns, None)
        self("hipLaunchKernel", address, Dim3(1, 1, 1), Dim3(1, 1, 1), params, 0, stream)

    # -- streams and events --------------------------------------------------------
    def stream(self, flags: int = 0) -> HANDLE:
        s = HANDLE()
        self("hipStreamCreateWithFlags", _c.byref(s), flags)
        return s

    def destroy_stream(self, stream: HANDLE | None) -> None:
        self("hipStreamDestroy", stream)

    def stream_synchronize(self, stream: HANDLE | None = None) -> None:
        self("hipStreamSynchronize", stream)

    def stream_done(self, stream: HANDLE | None = None) -> bool:
        rc = self.raw("hipStreamQuery", stream)
        if rc in (HIP_SUCCESS, HIP_ERROR_NOT_READY):
            return rc == HIP_SUCCESS
        raise HipError("hipStreamQuery", rc, self.error_name(rc))

    def event(self, flags: int = 0) -> HANDLE:
        e = HANDLE()
        self("hipEventCreateWithFlags", _c.byref(e), flags)
        return e

    def record(self, event: HANDLE, stream: HANDLE | None = None) -> None:
        self("hipEventRecord", event, stream)

    def wait_event(self, stream: HANDLE | None, event: HANDLE) -> None:
        self("hipStreamWaitEvent", stream, event, 0)

    def event_synchronize(self, event: HANDLE) -> None:
        self("hipEventSynchronize", event)

    def elapsed_ms(self, start: HANDLE, end: HANDLE) -> float:
        ms = _c.c_float()
        self("hipEventElapsedTime", _c.byref(ms), start, end)
        return ms.value

    def destroy_event(self, event: HANDLE) -> None:
        self("hipEventDestroy", event)

    # Event-timed launches, one at a time: the same steps over HIP's calls.
    time_kernel = SimCuda.time_kernel

    # -- memory -----------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        p = PTR()
        self("hipMalloc", _c.byref(p), nbytes)
        return p.value or 0

    def free(self, ptr: int) -> None:
        self("hipFree", ptr)

    def copy_htod(self, dst: int, data: bytes) -> None:
        buf = _c.create_string_buffer(bytes(data), len(data))
        self("hipMemcpy", dst, buf, len(data), HIP_MEMCPY_HOST_TO_DEVICE)

    def copy_dtoh(self, src: int, nbytes: int) -> bytes:
        buf = _c.create_string_buffer(nbytes)
        self("hipMemcpy", buf, src, nbytes, HIP_MEMCPY_DEVICE_TO_HOST)
        return buf.raw

    def memset_d8(self, dst: int, value: int, count: int) -> None:
        self("hipMemset", dst, value, count)

    # A kernel's completion counter, made and read over HIP's memory calls.
    counter = SimCuda.counter
    read_u64 = SimCuda.read_u64


def sim_gpu(device: int = 0) -> SimCuda | SimHip:
    """The simulated GPU client of this tenant's GPU's vendor (KREX_GPU_VENDOR)."""
    return SimHip(device) if os.environ.get(VENDOR_ENV) == "amd" else SimCuda(device)
