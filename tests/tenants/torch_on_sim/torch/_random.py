"""The stand-in's random numbers: one numpy generator per process, reseeded
by `torch.manual_seed` (the same seed gives the same values, as in torch;
not torch's values)."""

from __future__ import annotations

from typing import Any

import numpy as np

_generator = [np.random.default_rng(0)]


def manual_seed(seed: int) -> None:
    _generator[0] = np.random.default_rng(int(seed))


def normal(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return _generator[0].standard_normal(shape, dtype=np.float32).astype(dtype)


def uniform(shape: tuple[int, ...], dtype: Any, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    return _generator[0].uniform(low, high, shape).astype(dtype)
