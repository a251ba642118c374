"""Stand-in for the part of PyTorch that the GPU integrity candidates
(tests/gpu/integrity_candidates) and the evaluation harness's CI problems
and candidates (tests/tenants/eval) use, on the simulated driver, so that the
same scripts run in CI (tests/integrity/test_integrity_catalogue.py,
tests/eval/test_harness.py). It is not torch. It makes the driver calls that
the interception library sees of torch, as torch makes them:

- each operator on a GPU tensor is one kernel launch (`cuLaunchKernel`) on
  the calling thread's current stream, its simulated duration scaled by the
  work (torch/_tensor.py); creating a GPU tensor with values (`randn`,
  `zeros`) launches one, `empty`/`empty_like` none; CPU tensors launch nothing;
- the current stream is per thread: the legacy default stream (NULL) unless
  `torch.cuda.stream(s)` says otherwise; `current_stream().cuda_stream` is
  its raw handle (0 for the legacy default stream);
- `torch.cuda.Stream()` is non-blocking (torch's stream pool creates its
  streams with cudaStreamNonBlocking), so it never joins the default stream
  implicitly;
- `Stream.wait_stream(s)` records an event on `s`, makes the stream wait for
  it (`cuStreamWaitEvent`) and destroys it;
- `Event(enable_timing=True)` is created at its first record; `record(s)` is
  `cuEventRecord` on `s` or the current stream, then `synchronize` and
  `elapsed_time` (`cuEventElapsedTime`);
- `torch.cuda.graph(g)` captures the kernels it would launch (nothing runs);
  `g.replay()` is one `cuGraphLaunch` on the current stream.

Values: a tensor small enough and of a dtype numpy has carries a numpy
array, and the operators compute on it (matmul, elementwise arithmetic,
relu, softmax, reductions, allclose...), so that a candidate's output can be
right or wrong; `manual_seed` makes `randn`/`rand` repeatable (numpy's
numbers, not torch's). The computing is done on the host when the operator is
called, whatever the simulated kernel's timing: stream order is the driver's
business here, values are not. Large or bfloat16 tensors are shape-only.
`with torch.device("cuda"):` makes the factory functions inside make GPU
tensors, as in torch 2. Memory: GPU tensors' bytes count against the simulated device's memory, and
one that does not fit raises torch.cuda.OutOfMemoryError.
`torch.nn` (Module, Linear, ReLU) and `torch.utils.cpp_extension.load_inline`
(a real C compile, its own docstring says the convention) are beside it.

What holds on a real GPU is checked there by tests/gpu/test_gpu_integrity.py.
"""

from __future__ import annotations

import contextlib
from typing import Any

from torch import _random as _rng
from torch import cuda, nn  # noqa: F401  (import torch gives torch.cuda and torch.nn, as in torch)
from torch._ops import allclose, matmul, relu, softmax  # noqa: F401
from torch._tensor import (  # noqa: F401  (torch's names)
    DEFAULT_DEVICE,
    FLOATING,
    NUMPY,
    VALUE_LIMIT,
    Tensor,
    bfloat16,
    device,
    elementwise_ns,
    float16,
    float32,
    float64,
    int32,
    int64,
    matmul_ns,
    numel,
)

float, half, double, long, int = float32, float16, float64, int64, int32
Size = tuple
MATMUL_NS = 20_000  # the longest simulated matmul


def manual_seed(seed: Any) -> None:
    _rng.manual_seed(seed)


class no_grad(contextlib.ContextDecorator):
    """Nothing is recorded for autograd in the stand-in: a no-op, usable as torch's."""

    def __enter__(self) -> no_grad:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


inference_mode = no_grad


def _shape(shape: tuple) -> tuple[int, ...]:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list) else tuple(shape)


def _make(shape: tuple[int, ...], dtype: str | None, device_: Any, values: Any, launch: bool = True) -> Tensor:
    """A new tensor; `values(shape, numpy dtype)` gives its values when it has any."""
    dtype = dtype or float32
    where = device(device_ if device_ is not None else DEFAULT_DEVICE[-1] if DEFAULT_DEVICE else "cpu")
    np_type = NUMPY.get(dtype)
    data = values(shape, np_type) if np_type is not None and numel(shape) <= VALUE_LIMIT else None
    t = Tensor(shape, dtype, where, data)
    if launch:
        t._launch(elementwise_ns(shape))
    return t


def randn(*shape: Any, device: Any = None, dtype: str | None = None, **_: Any) -> Tensor:
    return _make(_shape(shape), dtype, device, _rng.normal)


def rand(*shape: Any, device: Any = None, dtype: str | None = None, **_: Any) -> Tensor:
    return _make(_shape(shape), dtype, device, _rng.uniform)


def zeros(*shape: Any, device: Any = None, dtype: str | None = None, **_: Any) -> Tensor:
    import numpy as np
    return _make(_shape(shape), dtype, device, np.zeros)


def ones(*shape: Any, device: Any = None, dtype: str | None = None, **_: Any) -> Tensor:
    import numpy as np
    return _make(_shape(shape), dtype, device, np.ones)


def empty(*shape: Any, device: Any = None, dtype: str | None = None, **_: Any) -> Tensor:
    import numpy as np
    return _make(_shape(shape), dtype, device, np.zeros, launch=False)


def _like(t: Tensor, maker: Any, dtype: str | None, device_: Any) -> Tensor:
    return maker(t.shape, dtype=dtype or t.dtype, device=device_ if device_ is not None else t.device)


def empty_like(t: Tensor, dtype: str | None = None, device: Any = None) -> Tensor:
    return _like(t, empty, dtype, device)


def zeros_like(t: Tensor, dtype: str | None = None, device: Any = None) -> Tensor:
    return _like(t, zeros, dtype, device)


def randn_like(t: Tensor, dtype: str | None = None, device: Any = None) -> Tensor:
    return _like(t, randn, dtype, device)


def tensor(values: Any, dtype: str | None = None, device: Any = None) -> Tensor:
    import numpy as np
    data = np.asarray(values, dtype=NUMPY[dtype or float32])
    return _make(data.shape, dtype, device, lambda shape, np_type: data.astype(np_type))


def mm(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    return matmul(a, b, out=out)


def addmm(bias: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """One kernel, as cuBLAS's fused bias: a @ b + bias."""
    out = matmul(a, b)
    if out.valued and bias.valued:
        out._data = out._data + bias._data
    return out


def bmm(a: Tensor, b: Tensor) -> Tensor:
    return matmul(a, b)


def abs(t: Tensor) -> Tensor:
    return t.abs()


def max(t: Tensor) -> Tensor:
    return t.max()


def sum(t: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return t.sum(dim, keepdim)
