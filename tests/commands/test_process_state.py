"""ProcessState's settings check, in a fresh Python process (no runtime; the
test runner's own modules change as it runs, so not in this one): what a
framework declares it can put back is set back and read again; anything
else, a setter that fails, or a setting that does not follow, retires."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A framework with settings a, b (b follows from a, as torch's
# float32_matmul_precision follows fp32_precision), c and d; `put_back` is the
# case's.
SCRIPT = r"""
import json, sys, types
from krex_runtime.tenant.process_state import ProcessState


def main(case):  # a function: __main__'s own bindings are made before the baseline
    values = {"a": 1, "c": 1, "d": 1}

    def set_a(x):
        values["a"] = x

    def refuse(x):
        raise RuntimeError("mixing APIs")

    put_back = {
        "put-back": {"a": set_a, "b": None, "d": None},
        "refused": {"a": refuse, "b": None},
        "ignored": {"a": lambda x: None, "b": None},
    }[case.split(":")[0]]
    module = types.ModuleType("krex_test_settings")
    module.__krex_state__ = {
        "settings": lambda: {"a": values["a"], "b": values["a"] * 10, "c": values["c"], "d": values["d"]},
        "put_back": put_back,
    }
    sys.modules["krex_test_settings"] = module
    state = ProcessState()
    values[case.split(":")[1]] = 2
    first = state.check()
    print(json.dumps({"first": first, "a": values["a"], "again": state.check()}))


main(sys.argv[1])
"""


def check(case: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, case], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_declared_setting_is_put_back_with_what_follows_from_it() -> None:
    assert check("put-back:a") == {"first": "", "a": 1, "again": ""}


@pytest.mark.parametrize(
    "case, why",
    [
        ("put-back:c", "state-changed: krex_test_settings.c"),  # no setter
        # declared as following from the others, which did not change: it does not come back
        ("put-back:d", "state-changed: krex_test_settings.d"),
        ("refused:a", "state-changed: krex_test_settings settings unreadable or not put back (RuntimeError)"),
        ("ignored:a", "state-changed: krex_test_settings.a"),  # the setter does nothing: it does not come back
    ],
)
def test_what_cannot_be_put_back_retires(case: str, why: str) -> None:
    assert check(case)["first"] == why
