"""Fuzzing the config loader: any file is a valid Config or one ConfigError
line that names the file and the key (with the nearest valid key for an
unknown one), never another exception; and numbers out of range are refused."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from fuzz_helpers import EDGE_FLOATS, EDGE_INTS, JUNK, TEXT, budget, mangled_fields, mutated
from hypothesis import example, given
from hypothesis import strategies as st
from runtime_helpers import REPO

from krex_runtime.node.config import MAX_DURATION_S, Config, ConfigError, load_config
from krex_runtime.wire.typed import closest_key, key_text

SECTIONS = {f.name: f.type for f in dataclasses.fields(Config) if f.name != "source"}
SECTION_TYPES = typing.get_type_hints(Config)
SETTINGS = {
    f"{name}.{f.name}": typing.get_type_hints(SECTION_TYPES[name])[f.name]
    for name in SECTIONS
    for f in dataclasses.fields(SECTION_TYPES[name])
}
SHIPPED = [p.read_bytes() for p in sorted((REPO / "configs").glob("*.toml"))]


def toml_value(value: Any) -> str:
    """TOML for a value drawn from the JSON-like strategies (None is left out)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    return "{" + ", ".join(f"{toml_value(k)} = {toml_value(v)}" for k, v in value.items() if v is not None) + "}"


def toml_document(data: dict[str, Any]) -> str:
    return "".join(f"{toml_value(k)} = {toml_value(v)}\n" for k, v in data.items() if v is not None)


def without_none(value: Any) -> Any:
    """The value as it reads back from TOML, which has no null."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [without_none(v) for v in value if v is not None]
    return value


def key_paths(data: Any, prefix: str = "", valid: list[str] | None = None) -> dict[str, tuple[str, list[str]]]:
    """Every key's path as messages write it -> (the key, the valid keys beside it)."""
    paths: dict[str, tuple[str, list[str]]] = {}
    if valid is None:
        valid = list(SECTIONS)
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        if isinstance(data, list):
            path = f"{prefix}[{k}]"
        else:
            path = f"{prefix}.{key_text(str(k))}" if prefix else key_text(str(k))
        paths[path] = (str(k), valid)
        inner = [f.name for f in dataclasses.fields(SECTION_TYPES[k])] if not prefix and k in SECTIONS else []
        paths |= key_paths(v, path, inner)
    return paths


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("config-fuzz") / "krex.toml"


def load_or_refuse(path: Path, content: bytes) -> Config | str:
    """The Config, or the ConfigError's message after the file name."""
    path.write_bytes(content)
    try:
        config = load_config(path)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ") and "\n" not in message.strip(), message
        return message[len(f"{path}: ") :]
    check_in_range(config)
    return config


def check_in_range(config: Config) -> None:
    """What validation promises of an accepted config."""
    for key in SETTINGS:
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        values = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else [value]
        for v in values:
            if isinstance(v, float):
                assert math.isfinite(v), key
                assert not name.endswith("_s") or v <= MAX_DURATION_S, key
                assert not name.endswith("_ms") or v <= MAX_DURATION_S * 1000, key
            if isinstance(v, str):
                assert "\0" not in v, key


def documents() -> st.SearchStrategy[dict[str, Any]]:
    """TOML-shaped data: the real sections with good, bad, missing and unknown
    keys, and unknown top-level keys."""
    section = st.sampled_from(sorted(SECTIONS)).flatmap(lambda n: mangled_fields(SECTION_TYPES[n]).map(lambda d: (n, d)))
    return st.lists(section | st.tuples(TEXT, JUNK), max_size=4).map(dict).map(without_none)


@budget(400)
@given(documents())
@example({"regions": {"cpu_slices": {"²": [0]}}}).via("a digit int() does not read")
@example({"runtime": {"snapshot_interval_s": float("inf")}})
@example({"dispatcher": {"default_timeout_s": float("nan")}})
@example({"runtime": {"max_message_bytes": 2**63}})
@example({"runtime": {"shutdown_grace_s": 10**400}}).via("an integer too large for a float")
@example({"regions": {"stale_after_s": 1e300, "heartbeat_interval_s": 1e299}})
@example({"tenants": {"env": {"A=B": "1"}}})
@example({"runtime": {"run_dir": "/tmp/\x00"}})
@example({"tenants": {"env": {"A_ms": "1"}}})
@example({"rc": []}).via("a key close to one that is not the file's")
@example({"source": "x"})
def test_documents_load_or_name_the_key(config_file: Path, data: dict[str, Any]) -> None:
    result = load_or_refuse(config_file, toml_document(data).encode())
    if isinstance(result, Config):
        return
    assert "not valid TOML" not in result, result
    paths = key_paths(data)
    named = [p for p in [*paths, *SETTINGS] if result.startswith(p)]
    assert named, f"the message names no key: {result}"
    path = max(named, key=len)
    if result.startswith(f"{path}: unknown key"):
        key, valid = paths[path]
        hint = closest_key(key, valid)
        assert (f"(did you mean '{hint}'?)" in result) if hint else "did you mean" not in result, result


TOML_BITS = st.binary(min_size=1, max_size=6) | st.sampled_from([b"[", b"]", b"=", b'"', b"\n[x]\n", b"\xff"])


@budget(300)
@given(st.sampled_from(SHIPPED).flatmap(lambda text: mutated(text, TOML_BITS)))
@example(b"\xff" + SHIPPED[0]).via("a byte that is not UTF-8")
def test_mangled_files_load_or_refuse(config_file: Path, text: bytes) -> None:
    result = load_or_refuse(config_file, text)
    if isinstance(result, str):
        assert re.match(r"(not valid TOML: |[\w.\[\]]+)", result), result


NUMERIC = {k: t for k, t in SETTINGS.items() if t in (int, float)}


@budget(300)
@given(st.sampled_from(sorted(NUMERIC)), EDGE_INTS | EDGE_FLOATS | st.integers(-5, 5) | st.floats())
def test_numbers_out_of_range_are_refused_by_name(config_file: Path, key: str, value: float) -> None:
    section, name = key.split(".")
    result = load_or_refuse(config_file, f"[{section}]\n{name} = {toml_value(value)}\n".encode())
    if isinstance(result, str):
        assert key in result, result
    else:
        assert getattr(getattr(result, section), name) == (float(value) if NUMERIC[key] is float else value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1.0", "0.0", "1e300"])
@pytest.mark.parametrize("key", sorted(k for k, t in NUMERIC.items() if t is float and k.endswith("_s")))
def test_every_duration_refuses_nonsense(config_file: Path, key: str, value: str) -> None:
    section, name = key.split(".")
    result = load_or_refuse(config_file, f"[{section}]\n{name} = {value}\n".encode())
    if value in ("nan", "inf", "-inf", "1e300"):
        assert isinstance(result, str) and result.startswith(key), result
    elif value == "-1.0" and not isinstance(result, str):
        raise AssertionError(f"{key} = -1.0 was accepted")
