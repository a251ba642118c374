"""Strict conversion of plain data (TOML tables, JSON bodies) into frozen dataclasses.

Config files and control messages share this one converter so that both reject
the same mistakes the same way: an unknown key names the closest valid key, a
value of the wrong type names the field and the type it wanted.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import sys
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")

_FLOAT_MAX = int(sys.float_info.max)


class ShapeError(ValueError):
    """Data that does not fit the dataclass it was meant for.

    `path` is the dotted location of the bad key ("dispatcher.slots_per_gpu").
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def closest_key(key: str, valid: typing.Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return matches[0] if matches else None


def from_dict(cls: type[T], data: Any, path: str = "", *, ignore_unknown: bool = False) -> T:
    """Build `cls` from `data`, refusing unknown keys and wrong types.
    `ignore_unknown`: keys the dataclass lacks are left out instead (a reply
    read by a client: a newer runtime may send more than it knows)."""
    if not isinstance(data, dict):
        raise ShapeError(path, f"expected a table, got {_type_name(data)}")
    # An "internal" field is set by the program, never read from data (nor suggested).
    # `cls` is a dataclass by contract; TypeVar T cannot say so to the checker.
    fields = {f.name: f for f in dataclasses.fields(cls)  # type: ignore[arg-type]
               if f.init and not f.metadata.get("internal")}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields and not ignore_unknown:
            hint = closest_key(str(key), fields)
            suggestion = f" (did you mean '{hint}'?)" if hint else ""
            raise ShapeError(_join(path, str(key)), f"unknown key{suggestion}")
    values = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _convert(hints[name], data[name], _join(path, name), ignore_unknown)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ShapeError(_join(path, name), "required key is missing")
    return cls(**values)


def to_dict(obj: Any) -> Any:
    """The inverse of from_dict: plain data ready for JSON."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _convert(hint: Any, value: Any, path: str, ignore_unknown: bool = False) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path, ignore_unknown)
            except ShapeError as exc:
                errors.append(exc.message)
        raise ShapeError(path, " or ".join(errors))
    if origin is typing.Literal:
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            raise ShapeError(path, f"expected one of {choices}, got {value!r}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ShapeError(path, f"expected a list, got {_type_name(value)}")
        item = args[0] if args else Any
        converted = [_convert(item, v, f"{path}[{i}]", ignore_unknown) for i, v in enumerate(value)]
        return tuple(converted) if origin is tuple else converted
    if origin is dict:
        if not isinstance(value, dict):
            raise ShapeError(path, f"expected a table, got {_type_name(value)}")
        key_t, val_t = args if args else (Any, Any)
        return {
            _convert(key_t, k, _join(path, str(k))): _convert(val_t, v, _join(path, str(k)), ignore_unknown)
            for k, v in value.items()
        }
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value, path, ignore_unknown=ignore_unknown)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ShapeError(path, f"expected a number, got {_type_name(value)}")
        # NaN and the infinities pass every `> 0` or `< limit` check the wrong way.
        if isinstance(value, int) and abs(value) > _FLOAT_MAX:
            raise ShapeError(path, "expected a number, got an integer too large for one")
        if isinstance(value, float) and not math.isfinite(value):
            raise ShapeError(path, f"expected a finite number, got {value}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ShapeError(path, f"expected an integer, got {_type_name(value)}")
        return value
    if hint in (str, bool):
        if not isinstance(value, hint):
            raise ShapeError(path, f"expected {_type_name_of(hint)}, got {_type_name(value)}")
        return value
    raise TypeError(f"{path}: unsupported field type {hint!r}")


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_text(key: str) -> str:
    """A key as a message shows it: bare when TOML would write it bare, else
    quoted with escapes, so a key of any characters stays on one line."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _join(path: str, key: str) -> str:
    key = key_text(key)
    return f"{path}.{key}" if path else key


def _type_name_of(t: type) -> str:
    return {str: "a string", bool: "true or false", int: "an integer", float: "a number"}.get(t, t.__name__)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "nothing"
    return _type_name_of(type(value))
