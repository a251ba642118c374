"""The CUDA context a pooled context process creates once and keeps.

One class per `pool.context` kind (the simulator, the driver API, torch, none):
each creates its context, runs the small health check made at start-up and
after each command, and frees what a command left on the device. Each kind
imports its driver lazily, so only the configured one becomes part of the
commands' baseline.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import Any


class Context:
    """The process's CUDA context: created once; freed and checked after each command."""

    kind = "none"

    def check(self) -> None:
        """A small piece of GPU work and a synchronise; raises if the context is unusable."""

    def free_leaks(self) -> str:
        """Free what the last command left on the device; "" or why it could not."""
        return ""


class SimContext(Context):
    """The simulated driver, through krex_runtime.sim.simcuda. Allocations made
    through SimCuda are tracked so that what a command leaks can be freed."""

    kind = "sim"

    def __init__(self) -> None:
        from krex_runtime.sim import device_file, layout, simcuda

        self.device_file, self.layout = device_file, layout
        self.cuda = simcuda.SimCuda(0)
        self.live: dict[int, Any] = {}
        live = self.live
        alloc, free = simcuda.SimCuda.alloc, simcuda.SimCuda.free

        def tracked_alloc(cuda: simcuda.SimCuda, nbytes: int) -> int:
            ptr = alloc(cuda, nbytes)
            live[ptr] = cuda
            return ptr

        def tracked_free(cuda: simcuda.SimCuda, ptr: int) -> None:
            free(cuda, ptr)
            live.pop(ptr, None)

        # mypy reads a function put on a class as a method of an extra `self`; these take the instance first.
        simcuda.SimCuda.alloc = tracked_alloc  # type: ignore[method-assign, assignment]
        simcuda.SimCuda.free = tracked_free  # type: ignore[method-assign, assignment]
        self._free = free

    def check(self) -> None:
        self.cuda.make_current()
        self.cuda.launch(1000)
        self.cuda.synchronize()

    def _used(self) -> int:
        try:
            state = self.device_file.read_device(os.environ.get(self.layout.ENV_DEVICE))
        except (OSError, ValueError):
            return -1
        return sum(sum(s.mem_used) for s in state.slots if s.pid == os.getpid())

    def free_leaks(self) -> str:
        self.cuda.make_current()
        for ptr in list(self.live):
            self._free(self.cuda, ptr)
            del self.live[ptr]
        used = self._used()
        return f"{used} bytes of device memory still allocated" if used > 0 else ""


class DriverContext(Context):
    """A real GPU through the driver API: cuInit, primary context, current."""

    kind = "driver"

    def __init__(self) -> None:
        import ctypes

        self.ct = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._call("cuInit", 0)
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), 0)
        self.device = dev.value
        self.ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), self.device)
        self._call("cuCtxSetCurrent", self.ctx)
        self.scratch = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(self.scratch), ctypes.c_size_t(4096))

    def _call(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed with CUresult {rc}")

    def check(self) -> None:
        ct = self.ct
        self._call("cuCtxSetCurrent", self.ctx)
        self._call("cuMemsetD8_v2", self.scratch, ct.c_ubyte(7), ct.c_size_t(4096))
        self._call("cuCtxSynchronize")


class TorchContext(Context):
    """torch.cuda's context (the primary one), created by torch.cuda.init()."""

    kind = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.cuda.init()
        torch.cuda.set_device(0)
        # Fill torch's lazily made caches now, so that they are part of the
        # baseline rather than a change made by the first command that uses them.
        torch.backends.cudnn.is_available()
        torch.cuda.get_device_properties(0)
        # Start torch's CPU thread pool (OpenMP, which its CPU matmuls share):
        # the first parallel CPU operation of a command would start it
        # otherwise, and a thread a command leaves retires the process (a
        # 64x64 CPU matmul started 15 on the H200, torch 2.11).
        (torch.ones(1 << 20) + 1).sum()
        _fill_triton_driver()
        self.baseline = 0

    def check(self) -> None:
        # A matmul, not just an add: it also creates the cuBLAS handle once, so
        # a command's first matmul does not pay for it.
        t = self.torch.ones(16, 16, device="cuda")
        t = t @ t
        self.torch.cuda.synchronize()
        del t
        self.baseline = self.torch.cuda.memory_allocated()

    def free_leaks(self) -> str:
        gc.collect()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        held = self.torch.cuda.memory_allocated() - self.baseline
        return f"{held} bytes of tensors still referenced" if held > 0 else ""


def _fill_triton_driver() -> None:
    """Triton binds its driver's helpers as module globals
    (triton.backends.nvidia.driver.PyCUtensorMap, ...) when its driver is first
    used, and nothing binds them again if they are put back; the first
    command that ran a Triton kernel would retire the process
    (state-changed). Made now, they are part of the baseline."""
    triton = sys.modules.get("triton")
    if triton is None:
        return
    try:
        triton.runtime.driver.active.utils  # noqa: B018 - the lookup builds the driver
    except Exception:  # a Triton without a usable driver: the check says what changes
        return


CONTEXTS: dict[str, Callable[[], Context]] = {
    "sim": SimContext,
    "driver": DriverContext,
    "torch": TorchContext,
    "none": Context,
}
