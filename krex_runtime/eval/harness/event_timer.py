"""Timing one call between two CUDA events, through the DRIVER.

The harness never times with torch.cuda.Event: a candidate runs in the same
process and can replace it. It loads libcuda.so.1 with ctypes (as any CUDA
program does: a preloaded interception library sees these calls and judges
each window at cuEventElapsedTime, docs/integrity.md) and calls
cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventElapsedTime and
cuEventDestroy_v2 (what cuda.h's cuEventDestroy names) itself. The events are
recorded on the stream the model runs on: torch's current stream, whose raw
handle `torch.cuda.current_stream().cuda_stream` gives (0: the legacy
default stream).

The driver needs the context torch made current on this thread: a timer is
made after torch has run something on the device.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

LIBRARY = "libcuda.so.1"
CU_EVENT_DEFAULT = 0  # timing enabled (CU_EVENT_DISABLE_TIMING not set)

_HANDLE = ctypes.c_void_p
_SIGNATURES: dict[str, list[Any]] = {
    "cuEventCreate": [ctypes.POINTER(_HANDLE), ctypes.c_uint],
    "cuEventRecord": [_HANDLE, _HANDLE],
    "cuEventSynchronize": [_HANDLE],
    "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _HANDLE, _HANDLE],
    "cuEventDestroy_v2": [_HANDLE],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class DriverError(RuntimeError):
    """A driver call that did not return CUDA_SUCCESS."""


class DriverTimer:
    """A pair of events on `stream` (a raw CUstream, 0 for the legacy default)."""

    def __init__(self, stream: int, library: str = LIBRARY) -> None:
        lib = ctypes.CDLL(library)
        self._calls: dict[str, Any] = {}
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            self._calls[name] = fn
        self.stream = _HANDLE(stream or None)
        self._start, self._end = self._create(), self._create()

    def _call(self, name: str, *args: Any) -> None:
        rc = int(self._calls[name](*args))
        if rc != 0:
            text = ctypes.c_char_p()
            self._calls["cuGetErrorName"](rc, ctypes.byref(text))
            raise DriverError(f"{name} failed: {(text.value or b'?').decode()} ({rc})")

    def _create(self) -> ctypes.c_void_p:
        event = _HANDLE()
        self._call("cuEventCreate", ctypes.byref(event), CU_EVENT_DEFAULT)
        return event

    def time(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        """Milliseconds between a start event before `fn()` and an end event
        after it, on the timer's stream, read once the end has completed
        (the trial's one synchronisation); and what `fn` returned."""
        self._call("cuEventRecord", self._start, self.stream)
        out = fn()
        self._call("cuEventRecord", self._end, self.stream)
        self._call("cuEventSynchronize", self._end)
        ms = ctypes.c_float()
        self._call("cuEventElapsedTime", ctypes.byref(ms), self._start, self._end)
        return float(ms.value), out

    def close(self) -> None:
        for event in (self._start, self._end):
            if event.value:
                self._call("cuEventDestroy_v2", event)
                event.value = None
