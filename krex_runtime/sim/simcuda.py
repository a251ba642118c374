"""The tenant-side client of the KREX *simulated* CUDA driver (stdlib + ctypes only).

The simulator (native/src/simcuda/, built to native/build/sim/libcuda.so.1)
is a libcuda for machines without a GPU: kernels sleep for their simulated
duration on a device shared by every process of the machine. Its figures are
not GPU figures.

``SimCuda`` is a small driver client used by the demo, test workloads and
benchmark tenants (and preloaded by pooled context processes): it loads
``libcuda.so.1`` with ``ctypes.CDLL`` and resolves symbols with ``dlsym`` like
any CUDA program, so a preloaded interception library sees its calls. Every
``CUresult`` is checked.

The rest of the simulator's Python side lives beside it, one concern each:
``layout`` (the contract with ``native/include/krex_simcuda.h``), ``driver``
(the ctypes bindings and the checkpoint lock), ``device_file`` (the shared
device file, read without a driver) and ``execution_log`` (``KREX_SIM_LOG``
as records).
"""

from __future__ import annotations

import ctypes as _c
import struct
from collections.abc import Sequence

from krex_runtime.sim.device_file import format_uuid
from krex_runtime.sim.driver import HANDLE, PTR, CudaError, CUdeviceptr, CUlaunchConfig, Driver
from krex_runtime.sim.layout import CU_EVENT_DEFAULT, CUDA_ERROR_NOT_READY, CUDA_SUCCESS


class SimCuda:
    """One tenant's view of a (simulated) device: primary context, one module.

    Kernels follow the simulator's convention: argument 0 is the solo
    duration in ns, argument 1 an optional device counter incremented on
    completion. `stream: HANDLE | None = None` is the default stream.
    """

    def __init__(self, device: int = 0, library: str = "libcuda.so.1"):
        self.drv = Driver(library)
        self.drv("cuInit", 0)
        dev = _c.c_int()
        self.drv("cuDeviceGet", _c.byref(dev), device)
        self.device = dev.value
        ctx = HANDLE()
        self.drv("cuDevicePrimaryCtxRetain", _c.byref(ctx), self.device)
        self.ctx = ctx
        self.drv("cuCtxSetCurrent", ctx)
        module = HANDLE()
        self.drv("cuModuleLoadData", _c.byref(module), b"krex simulated module")
        self.module = module
        self._functions: dict[str, HANDLE] = {}

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
        return format_uuid(buf.raw)

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
    def function(self, name: str = "sim_kernel") -> HANDLE:
        f = self._functions.get(name)
        if f is None:
            f = HANDLE()
            self.drv("cuModuleGetFunction", _c.byref(f), self.module, name.encode())
            self._functions[name] = f
        return f

    @staticmethod
    def _params(duration_ns: int, counter: int | None) -> tuple[_c.Array[_c.c_void_p], tuple[_c.c_uint64, _c.c_uint64]]:
        duration = _c.c_uint64(int(duration_ns))
        counter_ptr = CUdeviceptr(counter or 0)
        params = (PTR * 2)(_c.cast(_c.byref(duration), PTR), _c.cast(_c.byref(counter_ptr), PTR))
        return params, (duration, counter_ptr)  # keep the values alive during the call

    def launch(self, duration_ns: int, stream: HANDLE | None = None, counter: int | None = None, name: str = "sim_kernel",
               grid: Sequence[int] = (1, 1, 1), block: Sequence[int] = (1, 1, 1)) -> None:
        params, _keep = self._params(duration_ns, counter)
        self.drv("cuLaunchKernel", self.function(name), *grid, *block, 0, stream, params, None)

    def launch_ex(self, duration_ns: int, stream: HANDLE | None = None, counter: int | None = None, name: str = "sim_kernel",
                  grid: Sequence[int] = (1, 1, 1), block: Sequence[int] = (1, 1, 1)) -> None:
        params, _keep = self._params(duration_ns, counter)
        cfg = CUlaunchConfig(*grid, *block, 0, stream, None, 0)
        self.drv("cuLaunchKernelEx", _c.byref(cfg), self.function(name), params, None)

    # -- streams and events ----------------------------------------------------
    def stream(self, flags: int = 0) -> HANDLE:
        s = HANDLE()
        self.drv("cuStreamCreate", _c.byref(s), flags)
        return s

    def destroy_stream(self, stream: HANDLE | None) -> None:
        self.drv("cuStreamDestroy_v2", stream)

    def stream_synchronize(self, stream: HANDLE | None = None) -> None:
        self.drv("cuStreamSynchronize", stream)

    def stream_done(self, stream: HANDLE | None = None) -> bool:
        rc = self.drv.raw("cuStreamQuery", stream)
        if rc in (CUDA_SUCCESS, CUDA_ERROR_NOT_READY):
            return rc == CUDA_SUCCESS
        raise CudaError("cuStreamQuery", rc, self.drv.error_name(rc))

    def event(self, flags: int = CU_EVENT_DEFAULT) -> HANDLE:
        e = HANDLE()
        self.drv("cuEventCreate", _c.byref(e), flags)
        return e

    def record(self, event: HANDLE, stream: HANDLE | None = None) -> None:
        self.drv("cuEventRecord", event, stream)

    def wait_event(self, stream: HANDLE | None, event: HANDLE) -> None:
        self.drv("cuStreamWaitEvent", stream, event, 0)

    def event_synchronize(self, event: HANDLE) -> None:
        self.drv("cuEventSynchronize", event)

    def elapsed_ms(self, start: HANDLE, end: HANDLE) -> float:
        ms = _c.c_float()
        self.drv("cuEventElapsedTime_v2", _c.byref(ms), start, end)
        return ms.value

    def destroy_event(self, event: HANDLE) -> None:
        self.drv("cuEventDestroy_v2", event)

    def time_kernel(self, duration_ns: int, repeats: int = 5, stream: HANDLE | None = None, name: str = "sim_kernel") -> list[float]:
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

    def copy_htod(self, dst: int, data: bytes, stream: HANDLE | None = None, asynchronous: bool = False) -> None:
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

    def memset_d32(self, dst: int, value: int, count: int, stream: HANDLE | None = None, asynchronous: bool = False) -> None:
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
        return int(struct.unpack("<Q", self.copy_dtoh(ptr, 8))[0])

    # -- entry points ----------------------------------------------------------------
    def proc_address(self, symbol: str, version: int = 13000, flags: int = 0) -> int:
        """cuGetProcAddress_v2; returns the function address."""
        p, status = PTR(), _c.c_int()
        self.drv("cuGetProcAddress_v2", symbol.encode(), _c.byref(p), version, flags, _c.byref(status))
        return p.value or 0
