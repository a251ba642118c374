"""Fixtures that start real runtimes (simulated GPUs) and real CLI processes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from runtime_helpers import REPO, stop_and_check

from krex_runtime import native_build
from krex_runtime.local_runtime import Runtime


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


@pytest.fixture(scope="session")
def native_built() -> Path:
    """Build native/ once per test session (the README's test command did too)."""
    subprocess.run(["make", "-s", "-C", str(REPO / "native")], check=True)
    lib = native_build.interception_library()
    assert lib.exists(), f"make did not produce {lib}"
    return lib


@pytest.fixture
def make_runtime(tmp_path: Path, native_built: Path) -> Iterator[Any]:
    """Start runtimes with `make_runtime(policy=..., slots=...)`; all are stopped and
    checked for leftovers at the end of the test. `parent` puts the runtime's
    folder elsewhere than the test's own (which only root may enter)."""
    started: list[Runtime] = []

    def make(name: str = "rt", parent: Path | None = None, **kwargs: Any) -> Runtime:
        rt = Runtime((parent or tmp_path) / name, **kwargs).start()
        started.append(rt)
        return rt

    yield make
    for rt in started:
        stop_and_check(rt)


@pytest.fixture
def runtime(make_runtime: Any) -> Runtime:
    return make_runtime()
