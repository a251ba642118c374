"""A TOML file into a strict dataclass (typed.py), every failure a one-line
error that names the file: the runtime's config and the cluster's read their
files the same way."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TypeVar

from krex_runtime.wire.typed import ShapeError, from_dict

T = TypeVar("T")


def load_toml(path: str | os.PathLike[str], cls: type[T], error: type[Exception], what: str) -> T:
    """`path` decoded as `cls`; `error(message)` on any failure. `what` names
    the file in the not-found message ("config file", "cluster config")."""
    try:
        with Path(path).open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise error(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid TOML: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        return from_dict(cls, data)
    except ShapeError as exc:
        raise error(f"{path}: {exc}") from None
    except RecursionError:
        raise error(f"{path}: a value is nested too deeply") from None
