"""Stand-in for torch.nn (torch/__init__.py says what the stand-in models):
Module (attributes that are tensors or modules are its parameters and
children; calling it calls forward; `to`/`cuda` move its parameters in
place), Parameter, Linear (initialised as torch's: uniform in
+-1/sqrt(in_features), from the seeded generator) and ReLU."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from torch import _random
from torch._tensor import NUMPY, Tensor
from torch.nn import functional


def Parameter(t: Tensor, requires_grad: bool = True) -> Tensor:
    return t


class Module:
    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        self.training = True

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Tensor):
            self.__dict__.setdefault("_parameters", {})[name] = value
        elif isinstance(value, Module):
            self.__dict__.setdefault("_modules", {})[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def parameters(self) -> Iterator[Tensor]:
        yield from self.__dict__.get("_parameters", {}).values()
        for child in self.__dict__.get("_modules", {}).values():
            yield from child.parameters()

    def to(self, *args: Any, **kwargs: Any) -> Module:
        for name, p in list(self.__dict__.get("_parameters", {}).items()):
            setattr(self, name, p.to(*args, **kwargs))  # (torch keeps the Parameter object and swaps its data)
        for child in self.__dict__.get("_modules", {}).values():
            child.to(*args, **kwargs)
        return self

    def cuda(self, device: Any = None) -> Module:
        return self.to(f"cuda:{device or 0}" if not isinstance(device, str) else device)

    def eval(self) -> Module:
        self.training = False
        return self

    def train(self, mode: bool = True) -> Module:
        self.training = mode
        return self


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    return Tensor(shape, "float32", "cpu", _random.uniform(shape, NUMPY["float32"], -bound, bound))


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, **_: Any) -> None:
        super().__init__()
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return functional.linear(x, self.weight, self.bias)


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


__all__ = ["Linear", "Module", "Parameter", "ReLU", "functional"]
