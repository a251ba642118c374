"""Where the native libraries built from native/ live.

KREX_NATIVE_DIR overrides the location (an installed node keeps them under
/usr/lib/krex, say); otherwise the build folder of this checkout is used.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def native_dir(sanitized: bool = False) -> Path:
    override = os.environ.get("KREX_NATIVE_DIR")
    base = Path(override) if override else REPO_ROOT / "native" / "build"
    return base / "asan" if sanitized else base


def interception_library(sanitized: bool = False) -> Path:
    """The library preloaded into every tenant."""
    return native_dir(sanitized) / "libkrex.so"


def simulated_driver_dir(sanitized: bool = False) -> Path:
    """The folder holding the simulated libcuda.so.1 (put it on LD_LIBRARY_PATH)."""
    return native_dir(sanitized) / "sim"
