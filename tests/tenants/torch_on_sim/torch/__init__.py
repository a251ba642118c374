"""Stand-in for the part of PyTorch that the GPU integrity candidates use
(tests/gpu/integrity_candidates), on the simulated driver, so that the same
candidate scripts run in CI (tests/integrity/test_integrity_catalogue.py). It is not
torch: no arithmetic happens. It makes the driver calls that the
interception library sees of torch, as torch makes them:

- each operator is one kernel launch (`cuLaunchKernel`) on the calling
  thread's current stream; `randn` and `zeros` launch one, `empty_like` none;
- the current stream is per thread: the legacy default stream (NULL) unless
  `torch.cuda.stream(s)` says otherwise;
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

What holds on a real GPU is checked there by tests/gpu/test_gpu_integrity.py.
"""

from __future__ import annotations

import itertools

from torch import cuda

bfloat16, float16, float32 = "bfloat16", "float16", "float32"
_ptrs = itertools.count(1 << 32, 1 << 20)

MATMUL_NS = 20_000  # simulated kernel durations


def _elementwise_ns(shape: tuple[int, ...]) -> int:
    """An elementwise kernel's: 1 ns per thousand elements, at least 2 us
    (do_bench's 256 MB cache clear takes about 60 us, as on an H200)."""
    n = 1
    for d in shape:
        n *= d
    return max(2_000, n // 1_000)


class Tensor:
    def __init__(self, shape: tuple[int, ...], dtype: str | None = None) -> None:
        self.shape, self.dtype = tuple(shape), dtype or float32
        self._ptr = next(_ptrs)

    def data_ptr(self) -> int:
        return self._ptr

    def __matmul__(self, other: Tensor) -> Tensor:
        return mm(self, other)

    def sum(self) -> Tensor:
        cuda._launch(_elementwise_ns(self.shape))
        return Tensor((), self.dtype)

    def add_(self, *_: object) -> Tensor:
        cuda._launch(_elementwise_ns(self.shape))
        return self

    def mul_(self, *_: object) -> Tensor:
        cuda._launch(_elementwise_ns(self.shape))
        return self

    def zero_(self) -> Tensor:
        cuda._launch(_elementwise_ns(self.shape))
        return self


def _shape(shape: tuple) -> tuple[int, ...]:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else tuple(shape)


def randn(*shape: int, device: str | None = None, dtype: str | None = None) -> Tensor:
    cuda._launch(_elementwise_ns(_shape(shape)))
    return Tensor(_shape(shape), dtype)


def zeros(*shape: int, device: str | None = None, dtype: str | None = None) -> Tensor:
    cuda._launch(_elementwise_ns(_shape(shape)))
    return Tensor(_shape(shape), dtype)


def empty(*shape: int, device: str | None = None, dtype: str | None = None) -> Tensor:
    return Tensor(_shape(shape), dtype)


def empty_like(t: Tensor) -> Tensor:
    return Tensor(t.shape, t.dtype)


def mm(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    cuda._launch(MATMUL_NS)
    return out if out is not None else Tensor((a.shape[0], b.shape[-1]), a.dtype)


def addmm(bias: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return mm(a, b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    cuda._launch(MATMUL_NS)
    return Tensor((a.shape[0], a.shape[1], b.shape[2]), a.dtype)


def relu(t: Tensor) -> Tensor:
    cuda._launch(_elementwise_ns(t.shape))
    return Tensor(t.shape, t.dtype)
