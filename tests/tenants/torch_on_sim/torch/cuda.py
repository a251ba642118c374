"""Stand-in for torch.cuda on the simulated driver (see torch/__init__.py),
with the device memory GPU tensors are counted against (`_memory`: the
simulated device's total, from the driver; KREX_SIM_TORCH_MEMORY, in bytes,
sets a smaller one)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator

from krex_runtime.sim.layout import CU_EVENT_DEFAULT
from krex_runtime.sim.simcuda import SimCuda

CU_STREAM_NON_BLOCKING = 1
_state = threading.local()  # per thread: context made current, current stream, capture in progress
_sim: list[SimCuda] = []


def _driver() -> SimCuda:
    if not _sim:
        _sim.append(SimCuda())
    if not getattr(_state, "current", False):
        _sim[0].make_current()  # torch (cudart) binds the primary context to each thread at its first call
        _state.current = True
    return _sim[0]


class OutOfMemoryError(RuntimeError):
    """torch.cuda.OutOfMemoryError (a RuntimeError, as torch's)."""


class _Memory:
    """The bytes of live GPU tensors, against the device's capacity."""

    def __init__(self) -> None:
        self.used = 0
        self._total: int | None = None
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        if self._total is None:
            limit = os.environ.get("KREX_SIM_TORCH_MEMORY")
            self._total = int(limit) if limit else _driver().mem_info()[1]
        return self._total

    def allocate(self, nbytes: int) -> None:
        with self._lock:
            free = self.total - self.used
            if nbytes > free:
                gib = 1 << 30
                raise OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {nbytes / gib:.2f} GiB. GPU 0 has a total capacity of "
                    f"{self.total / gib:.2f} GiB of which {free / gib:.2f} GiB is free.")
            self.used += nbytes

    def free(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes


_memory = _Memory()


def is_available() -> bool:
    return _driver().device_count() > 0


def device_count() -> int:
    return _driver().device_count()


def set_device(index: object) -> None:
    _driver()  # the simulated tenant sees one device: its context is made current here


def current_device() -> int:
    return 0


def memory_allocated(device: object = None) -> int:
    return _memory.used


class Stream:
    def __init__(self, handle: object = None) -> None:
        self.handle = _driver().stream(CU_STREAM_NON_BLOCKING) if handle is None else handle

    @property
    def cuda_stream(self) -> int:
        """The raw CUstream, as an integer (0: the legacy default stream)."""
        value = getattr(self.handle, "value", self.handle)
        return int(value or 0)

    def synchronize(self) -> None:
        _driver().stream_synchronize(self.handle)

    def wait_stream(self, other: Stream) -> None:
        e = Event()
        e.record(other)
        _driver().wait_event(self.handle, e.handle)
        e.destroy()


class _DefaultStream(Stream):
    def __init__(self) -> None:
        self.handle = None  # the legacy default stream


def current_stream() -> Stream:
    return getattr(_state, "stream", None) or _DefaultStream()


def default_stream() -> Stream:
    return _DefaultStream()


@contextlib.contextmanager
def stream(s: Stream) -> Iterator[None]:
    before = getattr(_state, "stream", None)
    _state.stream = s
    try:
        yield
    finally:
        _state.stream = before


def synchronize() -> None:
    _driver().synchronize()


def _launch(duration_ns: int, ex: bool = False) -> None:
    """One kernel on the current stream (`ex`: through cuLaunchKernelEx, as Triton launches)."""
    captured = getattr(_state, "capture", None)
    if captured is not None:
        captured.append(duration_ns)  # a graph capture runs nothing
        return
    launch = _driver().launch_ex if ex else _driver().launch
    launch(duration_ns, stream=current_stream().handle)


class Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.handle: object = None

    def record(self, stream: Stream | None = None) -> None:
        if self.handle is None:
            self.handle = _driver().event(CU_EVENT_DEFAULT)
        _driver().record(self.handle, (stream or current_stream()).handle)

    def synchronize(self) -> None:
        _driver().event_synchronize(self.handle)

    def elapsed_time(self, end: Event) -> float:
        return _driver().elapsed_ms(self.handle, end.handle)

    def destroy(self) -> None:
        if self.handle is not None:
            _driver().destroy_event(self.handle)
            self.handle = None


class _KernelNode(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v1
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p)]


def _call(name: str, *args: object) -> None:
    rc = getattr(_driver().drv.lib, name)(*args)  # dlsym: the interposer sees it
    if rc != 0:
        raise RuntimeError(f"{name} failed: {rc}")


class CUDAGraph:
    def __init__(self) -> None:
        self.exec = ctypes.c_void_p()

    def _instantiate(self, durations: list[int]) -> None:
        sim = _driver()
        graph, node = ctypes.c_void_p(), ctypes.c_void_p()
        _call("cuGraphCreate", ctypes.byref(graph), ctypes.c_uint(0))
        for ns in durations:
            duration, counter = ctypes.c_uint64(ns), ctypes.c_uint64(0)
            params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(duration), ctypes.c_void_p),
                                           ctypes.cast(ctypes.byref(counter), ctypes.c_void_p))
            p = _KernelNode(sim.function().value, (1, 1, 1), (1, 1, 1), 0,
                            ctypes.cast(params, ctypes.c_void_p), None)
            _call("cuGraphAddKernelNode", ctypes.byref(node), graph, None, ctypes.c_size_t(0), ctypes.byref(p))
        _call("cuGraphInstantiateWithFlags", ctypes.byref(self.exec), graph, ctypes.c_ulonglong(0))
        _call("cuGraphDestroy", graph)

    def replay(self) -> None:
        s = current_stream().handle
        _call("cuGraphLaunch", self.exec, ctypes.c_void_p() if s is None else s)


@contextlib.contextmanager
def graph(g: CUDAGraph) -> Iterator[None]:
    synchronize()
    _state.capture = []
    try:
        yield
    finally:
        durations, _state.capture = _state.capture, None
    g._instantiate(durations)
