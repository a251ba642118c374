"""Reading a config file: TOML into the typed sections (an unknown key is an
error that names the nearest valid one), then the rules; and the one-line
verdict on a file that `--check-config` gives.
"""

from __future__ import annotations

import os
from dataclasses import replace

from krex_runtime.node.config.rules import validate
from krex_runtime.node.config.sections import Config, ConfigError
from krex_runtime.wire.toml_file import load_toml


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Load and validate a config file; None gives the built-in defaults."""
    if path is None:
        return validate(Config())
    config = load_toml(path, Config, ConfigError, "config file")
    return validate(replace(config, source=str(path)))


def problem_of_file(path: str) -> str:
    """What is wrong with a config file, in one line that names it, read as a
    start would read it; "" when it is valid (`krex-runtime --check-config`
    and `krex check-config` say this)."""
    try:
        validate(load_config(path))
    except ConfigError as exc:
        return f"{path}: {exc}".replace(f"{path}: {path}", path)
    return ""
