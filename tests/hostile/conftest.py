"""Fixtures of the hostile tests that run tenants or submitters as uids of their own."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _open_folder() -> Iterator[Path]:
    """A folder other uids (tenants', submitters') may pass through: tmp_path is root's alone."""
    path = Path(tempfile.mkdtemp(prefix="krex-hostile-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder of one test's that other uids may pass through."""
    yield from _open_folder()


@pytest.fixture(scope="module")
def open_module_root() -> Iterator[Path]:
    """A folder of one test module's that other uids may pass through."""
    yield from _open_folder()
