"""A candidate's output against the reference's: structure, then each
tensor's shape, then its dtype, then its values (max absolute and relative
error, and torch.allclose with the tolerances). Outputs may be one tensor or
a (nested) tuple or list of tensors, compared position by position.

The relative error is |out - ref| / max(|ref|, 1e-8), element by element;
it is reported, the tolerance decides (allclose: |out - ref| <= atol +
rtol * |ref|). A non-finite error (NaN or inf in the output) is reported as
None and never passes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from krex_runtime.eval.harness.failures import INCORRECT, WRONG_DTYPE, WRONG_SHAPE

REL_FLOOR = 1e-8


@dataclass(frozen=True)
class Comparison:
    failure: str | None  # None (it matches), wrong_shape, wrong_dtype or incorrect
    message: str
    max_abs_error: float | None
    max_rel_error: float | None


def _tensors(value: Any, is_tensor: Callable[[Any], bool]) -> list[Any] | None:
    if is_tensor(value):
        return [value]
    if isinstance(value, tuple | list):
        out: list[Any] = []
        for v in value:
            got = _tensors(v, is_tensor)
            if got is None:
                return None
            out.extend(got)
        return out
    return None


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _dtype_name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


def _errors(torch: Any, out: Any, ref: Any) -> tuple[float, float]:
    if out.numel() == 0:
        return 0.0, 0.0
    o, r = out.float(), ref.float()
    diff = (o - r).abs()
    return float(diff.max().item()), float((diff / r.abs().clamp(min=REL_FLOOR)).max().item())


def _worst(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(a, b)


def compare(torch: Any, ref: Any, out: Any, atol: float, rtol: float) -> Comparison:
    """`out` (the candidate's) against `ref` (the reference's)."""
    is_tensor = lambda v: isinstance(v, torch.Tensor)  # noqa: E731
    refs, outs = _tensors(ref, is_tensor), _tensors(out, is_tensor)
    if refs is None:
        raise TypeError(f"the reference returned {type(ref).__name__}, not tensors")
    if outs is None or len(outs) != len(refs):
        what = type(out).__name__ if outs is None else f"{len(outs)} tensors"
        return Comparison(WRONG_SHAPE, f"output is {what}, the reference's {len(refs)} tensor(s)", None, None)
    worst_abs: float | None = 0.0
    worst_rel: float | None = 0.0
    for i, (r, o) in enumerate(zip(refs, outs)):
        at = f"output {i}: " if len(refs) > 1 else "output "
        if tuple(o.shape) != tuple(r.shape):
            return Comparison(WRONG_SHAPE, f"{at}shape {tuple(o.shape)} differs from the reference's {tuple(r.shape)}",
                              None, None)
        if o.dtype != r.dtype:
            return Comparison(WRONG_DTYPE, f"{at}dtype {_dtype_name(o.dtype)} differs from the reference's "
                              f"{_dtype_name(r.dtype)}", None, None)
        abs_err, rel_err = _errors(torch, o, r)
        worst_abs, worst_rel = _worst(worst_abs, _finite(abs_err)), _worst(worst_rel, _finite(rel_err))
        if not bool(torch.allclose(o.float(), r.float(), atol=atol, rtol=rtol)):
            why = "non-finite values" if _finite(abs_err) is None else f"max abs error {abs_err:.3g}"
            return Comparison(INCORRECT, f"{at}out of tolerance (atol={atol:g}, rtol={rtol:g}): {why}",
                              worst_abs, worst_rel)
    return Comparison(None, "matches", worst_abs, worst_rel)
