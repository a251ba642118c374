"""Fixtures of the hostile tests that run tenants or submitters as uids of their own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import open_folder


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder of one test's that other uids may pass through."""
    yield from open_folder("krex-hostile-")


@pytest.fixture(scope="module")
def open_module_root() -> Iterator[Path]:
    """A folder of one test module's that other uids may pass through."""
    yield from open_folder("krex-hostile-")
