"""The canary: a tenant that times two fixed reference kernels, to estimate how
much the GPU's other work inflates measurements.

One canary runs per GPU as a tenant of the runtime. It warms the GPU, sizes a
compute-bound and a memory-bound kernel to about --target-ms each, takes a
baseline inside a region (the others frozen: the GPU is otherwise idle), then
every --period seconds times both kernels, with --outside first outside a
region (what sharing costs), then inside one (what KREX protects). Each result
is one JSON line on stdout, which the runtime folds into its state.

Simulated GPUs use the simulator's kernels and copies (their figures are
simulator figures); real GPUs use PyTorch (a bf16 matmul and a device copy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from krex_runtime.tenant.region import region

if TYPE_CHECKING:
    from krex_runtime.sim.simcuda import SimCuda

REPEATS = 7


class Kernels(Protocol):
    """A compute kernel and a copy, each timed in milliseconds (the median of REPEATS)."""

    def compute(self) -> float: ...

    def memory(self) -> float: ...

    def warm(self, seconds: float) -> None: ...


class SimKernels:
    def __init__(self, target_ms: float) -> None:
        from krex_runtime.sim.simcuda import SimCuda

        self.cuda = SimCuda()
        self.kernel_ns = int(target_ms * 1e6)
        nbytes = int(target_ms * 1e6)  # the simulator copies 1 byte per ns by default
        self.src, self.dst, self.nbytes = self.cuda.alloc(nbytes), self.cuda.alloc(nbytes), nbytes

    def compute(self) -> float:
        return statistics.median(self.cuda.time_kernel(self.kernel_ns, repeats=REPEATS))

    def memory(self) -> float:
        return _timed(self.cuda, lambda: self.cuda.copy_dtod(self.dst, self.src, self.nbytes))

    def warm(self, seconds: float) -> None:
        self.compute()


def _timed(cuda: SimCuda, launch: Callable[[], None]) -> float:
    start, end = cuda.event(), cuda.event()
    times: list[float] = []
    for _ in range(REPEATS):
        cuda.record(start)
        launch()
        cuda.record(end)
        cuda.event_synchronize(end)
        times.append(cuda.elapsed_ms(start, end))
    cuda.destroy_event(start)
    cuda.destroy_event(end)
    return statistics.median(times)


class TorchKernels:
    def __init__(self, target_ms: float) -> None:
        import torch

        self.torch = torch
        self.target_ms = target_ms
        self.n = 4096
        self.a = torch.randn(self.n, self.n, device="cuda", dtype=torch.bfloat16)
        self.b = torch.randn(self.n, self.n, device="cuda", dtype=torch.bfloat16)
        self.src = torch.empty(64 << 20, device="cuda", dtype=torch.uint8)
        self.dst = torch.empty_like(self.src)

    def _time(self, fn: Callable[[], object]) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times: list[float] = []
        for _ in range(REPEATS):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def compute(self) -> float:
        return self._time(lambda: self.a @ self.b)

    def memory(self) -> float:
        return self._time(lambda: self.dst.copy_(self.src))

    def warm(self, seconds: float) -> None:
        """Bring the clocks up, then size both kernels to about the target."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.a @ self.b
        self.torch.cuda.synchronize()
        scale = (self.target_ms / self.compute()) ** (1 / 3)
        self.n = max(256, int(self.n * scale) // 64 * 64)
        self.a = self.torch.randn(self.n, self.n, device="cuda", dtype=self.torch.bfloat16)
        self.b = self.torch.randn(self.n, self.n, device="cuda", dtype=self.torch.bfloat16)
        size = max(1 << 20, int(self.src.numel() * self.target_ms / self.memory()))
        self.src = self.torch.empty(size, device="cuda", dtype=self.torch.uint8)
        self.dst = self.torch.empty_like(self.src)


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


BASELINE_ROUNDS = 3


def baseline_of(kernels: Kernels, rounds: int = BASELINE_ROUNDS) -> dict[str, float]:
    """The idle GPU's times: the least of a few medians. Interference (a host
    that is busy starting every canary at once, on the simulator a late
    wake-up) only ever lengthens a timing, and one inflated baseline would
    understate every inflation measured against it for as long as it runs."""
    return {
        "compute_ms": min(kernels.compute() for _ in range(rounds)),
        "memory_ms": min(kernels.memory() for _ in range(rounds)),
    }


def measure(kernels: Kernels, where: str) -> dict[str, float]:
    if where == "outside":
        return {"compute_ms": kernels.compute(), "memory_ms": kernels.memory()}
    with region():
        return {"compute_ms": kernels.compute(), "memory_ms": kernels.memory()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=["sim", "torch"], default="sim")
    p.add_argument("--period", type=float, default=10.0)
    p.add_argument("--target-ms", type=float, default=1.0)
    p.add_argument("--outside", action="store_true")
    p.add_argument("--warm-s", type=float, default=2.0)
    args = p.parse_args()
    kernels: Kernels = TorchKernels(args.target_ms) if args.device == "torch" else SimKernels(args.target_ms)
    with region():
        kernels.warm(args.warm_s)
        baseline = baseline_of(kernels)
    emit({"type": "baseline", **baseline})
    while True:
        time.sleep(args.period)
        # Outside first: the others have then run unhindered for a period. Right
        # after this canary's own region they would still be waking from the
        # gate (tens of ms on a busy host), and the sample would understate
        # what sharing costs.
        if args.outside:
            emit({"type": "sample", "where": "outside", **measure(kernels, "outside")})
        emit({"type": "sample", "where": "inside", **measure(kernels, "inside")})


if __name__ == "__main__":
    main()
