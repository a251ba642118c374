"""The stand-in's operators (torch/_tensor.py says how they compute and
launch): each is one kernel on the current stream when its tensors are on
the GPU, computed with numpy when they have values, shape-only otherwise.
They are installed as Tensor's methods and torch's functions."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from torch import _random
from torch._tensor import Tensor, elementwise_ns, matmul_ns


def _same_device(*tensors: Tensor) -> None:
    devices = {str(t.device) for t in tensors if t.dim() > 0}  # a 0-dim tensor goes anywhere, as in torch
    if len(devices) > 1:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{' and '.join(sorted(devices))}!")


def _values(x: Any) -> Any:
    return x._data if isinstance(x, Tensor) else x


def _has_values(*xs: Any) -> bool:
    return all(not isinstance(x, Tensor) or x.valued for x in xs)


def _binary(fn: Callable[[Any, Any], Any], reverse: bool = False) -> Callable[[Tensor, Any], Tensor]:
    def op(a: Tensor, b: Any) -> Tensor:
        if reverse:
            a, b = b, a
        tensors = [x for x in (a, b) if isinstance(x, Tensor)]
        _same_device(*tensors)
        first = tensors[0]
        shapes = [x.shape for x in tensors]
        shape = tuple(np.broadcast_shapes(*shapes))
        first._launch(elementwise_ns(shape))
        if not _has_values(a, b):
            return first._made(shape, None)
        data = fn(_values(a), _values(b))
        if isinstance(data, np.ndarray) and data.dtype == np.float64 and first.dtype == "float32":
            data = data.astype(np.float32)  # a python float keeps a float32 tensor float32, as in torch
        return first._made(shape, np.asarray(data))
    return op


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Tensor]:
    def op(t: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        t._launch(elementwise_ns(t.shape))
        return t._made(t.shape, None if t._data is None else fn(t._data, *args, **kwargs))
    return op


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[..., Tensor]:
    def op(t: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
        t._launch(elementwise_ns(t.shape))
        if t._data is None:
            shape = () if dim is None else tuple(d for i, d in enumerate(t.shape) if i != dim % t.dim())
            return t._made(shape, None)
        data = np.asarray(fn(t._data, axis=dim, keepdims=keepdim if dim is not None else False))
        return t._made(data.shape, data.astype(t._data.dtype))
    return op


def matmul(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    _same_device(a, b)
    m, k = (a.shape[-2] if a.dim() > 1 else 1), a.shape[-1]
    n = b.shape[-1] if b.dim() > 1 else 1
    batch = int(np.prod(a.shape[:-2])) if a.dim() > 2 else 1
    a._launch(matmul_ns(m * batch, k, n))
    if a.valued and b.valued:
        data = np.matmul(a._data, b._data)
        result = a._made(data.shape, data)
    else:
        shape = (*a.shape[:-1], b.shape[-1]) if b.dim() > 1 else a.shape[:-1]
        result = a._made(shape, None)
    if out is None:
        return result
    if out.valued and result.valued:
        out._data[...] = result._data
    return out


def _softmax(x: np.ndarray, dim: int) -> np.ndarray:
    shifted = x - x.max(axis=dim, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=dim, keepdims=True)


def _clamp(x: np.ndarray, min: float | None = None, max: float | None = None) -> np.ndarray:
    return np.clip(x, min, max)


def _inplace(t: Tensor, data: Any) -> Tensor:
    t._launch(elementwise_ns(t.shape))
    if t._data is not None and data is not None:
        t._data[...] = data
    return t


def copy_(t: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    if tuple(np.broadcast_shapes(t.shape, src.shape)) != t.shape:
        raise RuntimeError(f"The size of tensor a ({t.shape}) must match the size of tensor b ({src.shape})")
    return _inplace(t, src._data if src.valued else None)


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return _inplace(t, None if t._data is None else _random.normal(t.shape, t._data.dtype) * std + mean)


def add_(t: Tensor, other: Any = 0, alpha: float = 1) -> Tensor:
    v = _values(other)
    return _inplace(t, None if t._data is None or v is None else t._data + alpha * v)


def mul_(t: Tensor, other: Any = 1) -> Tensor:
    v = _values(other)
    return _inplace(t, None if t._data is None or v is None else t._data * v)


def fill_(t: Tensor, value: float) -> Tensor:
    return _inplace(t, value)


def zero_(t: Tensor) -> Tensor:
    return _inplace(t, 0)


def allclose(a: Tensor, b: Tensor, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    _same_device(a, b)
    a._launch(elementwise_ns(a.shape))
    return bool(np.allclose(a.values(), b.values(), rtol=rtol, atol=atol, equal_nan=equal_nan))


relu = _unary(lambda x: np.maximum(x, 0).astype(x.dtype))
softmax = _unary(lambda x, dim=-1: _softmax(x, dim))
METHODS: dict[str, Any] = {
    "__add__": _binary(operator.add), "__radd__": _binary(operator.add, reverse=True),
    "__sub__": _binary(operator.sub), "__rsub__": _binary(operator.sub, reverse=True),
    "__mul__": _binary(operator.mul), "__rmul__": _binary(operator.mul, reverse=True),
    "__truediv__": _binary(operator.truediv), "__rtruediv__": _binary(operator.truediv, reverse=True),
    "__neg__": _unary(operator.neg), "__matmul__": matmul, "matmul": matmul,
    "abs": _unary(np.abs), "exp": _unary(np.exp), "relu": relu, "clamp": _unary(_clamp),
    "softmax": softmax, "sum": _reduce(np.sum), "mean": _reduce(np.mean), "max": _reduce(np.max),
    "copy_": copy_, "normal_": normal_, "add_": add_, "mul_": mul_, "fill_": fill_, "zero_": zero_,
}
for _name, _fn in METHODS.items():
    setattr(Tensor, _name, _fn)
