"""Stand-in for the part of Triton that the GPU integrity candidates use
(tests/tenants/torch_on_sim/torch/__init__.py says why): `@triton.jit`
kernels whose launch `kernel[grid](...)` is one `cuLaunchKernelEx` on torch's
current stream, as Triton's launcher makes it, and `triton.cdiv`."""

from __future__ import annotations

from collections.abc import Callable

from torch import cuda


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class JITFunction:
    def __init__(self, fn: Callable[..., object]) -> None:
        self.fn = fn

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def launch(*args: object, **kwargs: object) -> None:
            cuda._launch(2_000, ex=True)

        return launch


def jit(fn: Callable[..., object]) -> JITFunction:
    return JITFunction(fn)
