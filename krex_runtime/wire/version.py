"""KREX's version, as its programs print it (`--version`).

The installed distribution's metadata (krex-runtime) is the one source. A
source checkout used without installing has none; it then reads the version
from the checkout's pyproject.toml, so that it still names a release.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "krex-runtime"
_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def krex_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        found = re.search(r'^version\s*=\s*"([^"]+)"', _PYPROJECT.read_text(), re.MULTILINE)
    except OSError:
        found = None
    return f"{found.group(1)}+checkout" if found else "unknown"


def version_line(program: str) -> str:
    """What `PROGRAM --version` prints."""
    return f"{program} {krex_version()}"
