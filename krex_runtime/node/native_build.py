"""Where the native libraries built from native/ live.

In order: KREX_NATIVE_DIR (an operator's own build, /usr/lib/krex say); the
libraries an installed wheel carries (krex_runtime/_native, put there by
setup.py, found with importlib.resources); the build folder of this checkout
(native/build, made by scripts/setup.sh; editable installs and the tests use
it). The sanitized variants exist only in a checkout's build (native/build/asan).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKOUT_BUILD = REPO_ROOT / "native" / "build"


def packaged_dir() -> Path | None:
    """krex_runtime/_native of an installed wheel, or None in a checkout."""
    # A wheel installs as plain files, so the resource is a real folder (no as_file needed).
    folder = Path(str(resources.files("krex_runtime").joinpath("_native")))
    return folder if (folder / "libkrex.so").is_file() else None


def native_dir(sanitized: bool = False) -> Path:
    override = os.environ.get("KREX_NATIVE_DIR")
    if override:
        base = Path(override)
    elif not sanitized and (packaged := packaged_dir()) is not None:
        return packaged
    else:
        base = CHECKOUT_BUILD
    return base / "asan" if sanitized else base


def interception_library(sanitized: bool = False) -> Path:
    """The library preloaded into every tenant."""
    return native_dir(sanitized) / "libkrex.so"


def hip_library(cuda_library: Path) -> Path:
    """The HIP interception library preloaded into an AMD GPU's tenants: built
    beside the CUDA one (libkrex_hip.so next to libkrex.so, either variant)."""
    return cuda_library.with_name("libkrex_hip.so")


def simulated_driver_dir(sanitized: bool = False) -> Path:
    """The folder holding the simulated libcuda.so.1 (put it on LD_LIBRARY_PATH)."""
    return native_dir(sanitized) / "sim"


def forwarding_client_dir(sanitized: bool = False) -> Path:
    """The folder holding forwarded mode's libcuda.so.1, the client that sends a
    command's driver calls to its context server (first on its LD_LIBRARY_PATH)."""
    return native_dir(sanitized) / "forward"


def context_server(sanitized: bool = False) -> Path:
    """krex-ctxd, forwarded mode's context server."""
    return native_dir(sanitized) / "krex-ctxd"


def header_dir() -> Path:
    """The folder holding krex.h, the C region API (`cc -I$(...)`): the
    override's include/, the wheel's, else the checkout's native/include."""
    override, packaged = os.environ.get("KREX_NATIVE_DIR"), packaged_dir()
    candidates = [Path(override) / "include"] if override else []
    candidates += [packaged / "include"] if packaged is not None else []
    candidates.append(REPO_ROOT / "native" / "include")
    return next(c for c in candidates if (c / "krex.h").is_file() or c == candidates[-1])
