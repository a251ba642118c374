"""Strategies and settings shared by the fuzzers."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

# Set to run every fuzzer with this many examples (the "long" profile, see conftest.py).
LONG_EXAMPLES = os.environ.get("KREX_FUZZ_EXAMPLES")


def budget(ci_examples: int) -> settings:
    """Settings for one fuzzer: `ci_examples` in CI, KREX_FUZZ_EXAMPLES when set."""
    return settings(max_examples=int(LONG_EXAMPLES) if LONG_EXAMPLES else ci_examples)


# Numbers a parser meets in the wild: the edges of int64 and float, and beyond.
EDGE_INTS = st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), 2**64, 10**30, -(10**30)])
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 1e-320, 1e308, -1e308, float("inf"), float("-inf"), float("nan")])
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20) | st.sampled_from(
    ["", " ", "\x00", "\n", "é", "\u202e", "🦀", "0", "-1", "1e9", "null", "true", "[]", "{}"]
)

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | EDGE_INTS
    | st.floats()
    | EDGE_FLOATS
    | TEXT
)

# Any JSON-like (and TOML-like) value: scalars, lists and objects nested a few deep.
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def valid_value(hint: Any) -> st.SearchStrategy[Any]:
    """Values that fit a dataclass field's type (as typed.from_dict reads it)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return JUNK
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[st.none() if a is type(None) else valid_value(a) for a in args])
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (list, tuple):
        return st.lists(valid_value(args[0] if args else Any), max_size=4)
    if origin is dict:
        key, val = args if args else (Any, Any)
        return st.dictionaries(valid_value(key), valid_value(val), max_size=4)
    if dataclasses.is_dataclass(hint):
        return valid_fields(hint)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers() | EDGE_INTS
    if hint is float:
        return st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    if hint is str:
        return TEXT
    raise TypeError(f"no strategy for {hint!r}")


def valid_fields(cls: type) -> st.SearchStrategy[dict[str, Any]]:
    """A dict for `cls`: every required field, some optional ones, all well typed."""
    hints = typing.get_type_hints(cls)
    required, optional = {}, {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        (optional if has_default else required)[f.name] = valid_value(hints[f.name])
    return st.fixed_dictionaries(required, optional=optional)


@st.composite
def mangled_fields(draw: st.DrawFn, cls: type) -> dict[str, Any]:
    """A dict for `cls` with some fields replaced by junk, dropped, or joined by unknown keys."""
    data = dict(draw(valid_fields(cls)))
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for name in draw(st.lists(st.sampled_from(names), max_size=3)) if names else []:
        if draw(st.booleans()):
            data[name] = draw(JUNK)
        else:
            data.pop(name, None)
    for key in draw(st.lists(TEXT, max_size=2)):
        data[key] = draw(JUNK)
    return data


SHORT_RUNS = st.binary(min_size=1, max_size=8)  # what `mutated` inserts unless told


@st.composite
def mutated(draw: st.DrawFn, base: bytes, inserts: st.SearchStrategy[bytes] = SHORT_RUNS) -> bytes:
    """`base` with a few bytes flipped, runs cut or `inserts` inserted, or the rest cut off."""
    out = bytearray(base)
    for _ in range(draw(st.integers(1, 5))):
        pos = draw(st.integers(0, len(out)))
        op = draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        if op == "flip" and pos < len(out):
            out[pos] = draw(st.integers(0, 255))
        elif op == "cut":
            del out[pos : pos + draw(st.integers(1, 16))]
        elif op == "insert":
            out[pos:pos] = draw(inserts)
        else:
            del out[pos:]
    return bytes(out)
