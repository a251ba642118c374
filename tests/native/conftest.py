"""Fixtures for the interception library's tests (helpers in krex_native.py).

Every test runs real processes: C test programs from native/tests (linked
against the simulated driver where they call it) and Python scripts, with
libkrex.so preloaded, in the normal and the ASan/UBSan build.
"""

from __future__ import annotations

import os
import shutil

import pytest
from krex_native import NATIVE, VARIANTS, Build, make


def _roots() -> dict[str, Build]:
    return {v: Build(v, NATIVE / ("build/asan" if v == "asan" else "build")) for v in VARIANTS}


@pytest.fixture(scope="session")
def lib_builds() -> dict[str, Build]:
    """Both variants of libkrex.so and the test programs that need no driver."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler")
    builds = _roots()
    for variant, b in builds.items():
        rel = b.root.relative_to(NATIVE)
        make(f"{rel}/libkrex.so", f"{rel}/tests/gate_layout", f"{rel}/tests/region_client",
             asan=variant == "asan")
    return builds


@pytest.fixture(scope="session")
def builds(lib_builds: dict[str, Build]) -> dict[str, Build]:
    """Plus the simulated driver and the test programs linked against it."""
    for variant in VARIANTS:
        make("sim", "intercept-tests", asan=variant == "asan")
    return lib_builds


@pytest.fixture(params=VARIANTS)
def lib_build(request: pytest.FixtureRequest, lib_builds: dict[str, Build]) -> Build:
    return lib_builds[request.param]


@pytest.fixture(params=VARIANTS)
def build(request: pytest.FixtureRequest, builds: dict[str, Build]) -> Build:
    return builds[request.param]


@pytest.fixture
def normal_build(builds: dict[str, Build]) -> Build:
    return builds["normal"]
