"""Stand-in for torch.nn.functional: relu, softmax, linear (one kernel:
x @ weight.T + bias, as cuBLAS's fused bias)."""

from __future__ import annotations

from typing import Any

from torch._ops import matmul
from torch._tensor import Tensor


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    return x.relu()


def softmax(x: Tensor, dim: int = -1, **_: Any) -> Tensor:
    return x.softmax(dim)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    out = matmul(x, weight.t())
    if bias is not None and out.valued and bias.valued:
        out._data = out._data + bias._data
    return out
