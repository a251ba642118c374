"""ProcessState's settings check in this process (no runtime): what a
framework declares it can put back is set back and read again; anything
else, a setter that fails, or a setting that does not follow, retires."""

from __future__ import annotations

import sys
import types
from typing import Any, Iterator

import pytest

from krex_runtime.tenant.process_state import ProcessState


def _framework(name: str, put_back: Any) -> dict[str, Any]:
    """A module `name` with settings a, b (b follows a, as torch's legacy
    allow_tf32 follows fp32_precision) and c."""
    values = {"a": 1, "c": 1}
    module = types.ModuleType(name)
    module.values = values  # type: ignore[attr-defined]
    module.__krex_state__ = {  # type: ignore[attr-defined]
        "settings": lambda: {"a": values["a"], "b": values["a"] * 10, "c": values["c"]},
        "put_back": put_back(values) if callable(put_back) else put_back,
    }
    sys.modules[name] = module
    return values


@pytest.fixture
def name() -> Iterator[str]:
    name = "krex_test_settings"
    yield name
    sys.modules.pop(name, None)


def test_a_declared_setting_is_put_back_with_what_follows_from_it(name: str) -> None:
    values = _framework(name, lambda v: {"a": lambda x: v.__setitem__("a", x), "b": None})
    state = ProcessState()
    values["a"] = 2
    assert state.check() == ""
    assert values["a"] == 1
    assert state.check() == ""


def test_a_setting_without_a_setter_retires(name: str) -> None:
    values = _framework(name, lambda v: {"a": lambda x: v.__setitem__("a", x), "b": None})
    state = ProcessState()
    values["c"] = 2
    assert state.check() == f"state-changed: {name}.c"


def test_a_setter_that_fails_retires(name: str) -> None:
    def refuse(_: Any) -> None:
        raise RuntimeError("mixing APIs")

    values = _framework(name, {"a": refuse, "b": None})
    state = ProcessState()
    values["a"] = 2
    assert state.check() == f"state-changed: {name} settings unreadable or not put back (RuntimeError)"


def test_a_setting_that_does_not_come_back_retires(name: str) -> None:
    values = _framework(name, lambda v: {"a": lambda x: None, "b": None})  # the setter does nothing
    state = ProcessState()
    values["a"] = 2
    assert state.check() == f"state-changed: {name}.a"
