"""The stand-in's Tensor (torch/__init__.py says what it models).

A tensor has a shape, a dtype, a device and, when it is small enough and
of a dtype numpy has, VALUES: a numpy array the operators compute on, so
that a KernelBench problem and its candidate really give outputs to compare.
A tensor over VALUE_LIMIT elements, or of bfloat16, is shape-only (the
timing candidates' 8192x8192 matrices): operators on it launch their kernel
and make a shape-only result; asking for its values (`item`, `allclose`)
is an error of the stand-in.

Every operator on a CUDA tensor is one simulated kernel launch on the
current stream, its duration scaled by the work (`elementwise_ns`,
`matmul_ns`); on a CPU tensor it launches nothing. A CUDA tensor's bytes are
counted against the simulated device's memory (torch/cuda.py): one over
what is free raises torch.cuda.OutOfMemoryError, as torch's caching
allocator does.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from torch import cuda

bfloat16, float16, float32, float64, int64, int32 = "bfloat16", "float16", "float32", "float64", "int64", "int32"
FLOATING = (bfloat16, float16, float32, float64)
NUMPY = {float16: np.float16, float32: np.float32, float64: np.float64, int64: np.int64, int32: np.int32}
ITEM_BYTES = {bfloat16: 2, float16: 2, float32: 4, float64: 8, int64: 8, int32: 4}
VALUE_LIMIT = 1 << 22  # elements: a tensor over it is shape-only
MATMUL_NS = 20_000  # the longest simulated matmul (the timing candidates' large ones all take it)
_ptrs = itertools.count(1 << 32, 1 << 20)


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def elementwise_ns(shape: tuple[int, ...]) -> int:
    """An elementwise kernel's: 1 ns per thousand elements, at least 2 us
    (do_bench's 256 MB cache clear takes about 60 us, as on an H200)."""
    return max(2_000, numel(shape) // 1_000)


def matmul_ns(m: int, k: int, n: int) -> int:
    """1 ns per thousand multiply-adds, between 2 us and MATMUL_NS."""
    return min(MATMUL_NS, max(2_000, m * k * n // 1_000))


class device:
    def __init__(self, kind: str | device = "cuda", index: int | None = None) -> None:
        text = str(kind)
        self.type, _, at = text.partition(":")
        self.index = int(at) if at else index
        if self.type == "cuda" and self.index is None:
            self.index = 0
        if self.type not in ("cuda", "cpu"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {text}")

    def __str__(self) -> str:
        return self.type if self.index is None or self.type == "cpu" else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other: object) -> bool:
        return str(self) == str(device(other) if isinstance(other, str) else other)

    def __hash__(self) -> int:
        return hash(str(self))

    # As a context manager (torch >= 2.0): the default device of the factory functions inside.
    def __enter__(self) -> device:
        DEFAULT_DEVICE.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        DEFAULT_DEVICE.pop()


DEFAULT_DEVICE: list[device] = []  # the innermost `with torch.device(...)` last


def _numpy_dtype(dtype: str) -> Any:
    return NUMPY.get(dtype)


def _dtype_of(array: np.ndarray) -> str:
    for name, np_type in NUMPY.items():
        if array.dtype == np_type:
            return name
    if array.dtype == np.bool_:
        return "bool"
    raise TypeError(f"stand-in: no dtype for numpy's {array.dtype}")


class Tensor:
    def __init__(self, shape: tuple[int, ...], dtype: str | None = None, device_: str | device = "cuda",
                 data: np.ndarray | None = None, owner: Tensor | None = None) -> None:
        self.shape, self.dtype = tuple(int(d) for d in shape), dtype or float32
        self.device = device_ if isinstance(device_, device) else device(device_)
        self._data = data
        self._ptr = owner._ptr if owner is not None else next(_ptrs)
        if self.device.type == "cuda" and owner is None:
            nbytes = numel(self.shape) * ITEM_BYTES.get(self.dtype, 4)
            cuda._memory.allocate(nbytes)
            weakref.finalize(self, cuda._memory.free, nbytes)

    # -- what a tensor is -------------------------------------------------
    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def valued(self) -> bool:
        return self._data is not None

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return numel(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def is_floating_point(self) -> bool:
        return self.dtype in FLOATING

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        values = "shape-only" if self._data is None else np.array2string(self._data, threshold=8)
        return f"tensor({values}, shape={self.shape}, dtype={self.dtype}, device='{self.device}')"

    def values(self) -> np.ndarray:
        if self._data is None:
            raise RuntimeError(f"stand-in: a shape-only tensor {self.shape} {self.dtype} has no values "
                               f"(over {VALUE_LIMIT} elements, or bfloat16)")
        return self._data

    def _launch(self, ns: int) -> None:
        if self.is_cuda:
            cuda._launch(ns)

    def _made(self, shape: tuple[int, ...], data: np.ndarray | None, dtype: str | None = None) -> Tensor:
        """A new tensor on this one's device, of `data` (None: shape-only)."""
        if data is not None:
            data = np.ascontiguousarray(data)
            dtype = dtype or _dtype_of(data)
        return Tensor(shape, dtype or self.dtype, self.device, data)

    # -- moves and casts --------------------------------------------------
    def to(self, *args: Any, dtype: str | None = None, device: Any = None, **_: Any) -> Tensor:
        for a in args:
            if isinstance(a, str) and a in ITEM_BYTES:
                dtype = a
            elif isinstance(a, str | device_type | int):
                device = a
        target = globals()["device"](f"cuda:{device}" if isinstance(device, int) else device or self.device)
        dtype = dtype or self.dtype
        if target == self.device and dtype == self.dtype:
            return self
        data = None
        if self._data is not None and _numpy_dtype(dtype) is not None:
            data = self._data.astype(_numpy_dtype(dtype))
        moved = Tensor(self.shape, dtype, target, data)
        (moved if moved.is_cuda else self)._launch(elementwise_ns(self.shape))  # the copy
        return moved

    def cuda(self, device: Any = None, **_: Any) -> Tensor:
        return self.to(device=f"cuda:{device or 0}" if not isinstance(device, str) else device)

    def cpu(self) -> Tensor:
        return self.to(device="cpu")

    def float(self) -> Tensor:
        return self.to(dtype=float32)

    def half(self) -> Tensor:
        return self.to(dtype=float16)

    def numpy(self) -> np.ndarray:
        if self.is_cuda:
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() first")
        return self.values()

    def item(self) -> Any:
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        if self.is_cuda:
            cuda.current_stream().synchronize()  # the copy to the host waits for the stream
        return self.values().reshape(()).item()

    def contiguous(self) -> Tensor:
        return self

    def detach(self) -> Tensor:
        return self

    def clone(self) -> Tensor:
        self._launch(elementwise_ns(self.shape))
        return self._made(self.shape, None if self._data is None else self._data.copy())

    def view(self, *shape: Any) -> Tensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape
        data = None if self._data is None else self._data.reshape(shape)
        out_shape = data.shape if data is not None else _resolve_shape(shape, self.numel())
        return Tensor(out_shape, self.dtype, self.device, data, owner=self)

    reshape = view

    def t(self) -> Tensor:
        data = None if self._data is None else self._data.T
        return Tensor(self.shape[::-1], self.dtype, self.device, data, owner=self)

    @property
    def T(self) -> Tensor:
        return self.t()


device_type = device


def _resolve_shape(shape: tuple[int, ...], n: int) -> tuple[int, ...]:
    known = numel(tuple(d for d in shape if d != -1))
    return tuple(n // known if d == -1 else d for d in shape)
