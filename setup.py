"""Builds native/ into the wheel: the Makefiles stay the one description of the
native build; this only runs them and copies what a node needs.

A wheel gets krex_runtime/_native/ with libkrex.so and libkrex_hip.so (the
CUDA and HIP interception libraries), sim/libcuda.so.1 and
sim/libamdhip64.so.5 (the simulated driver and HIP runtime), forward/libcuda.so.1,
forward/libcudart.so.N and krex-ctxd (forwarded mode) and include/krex.h, found
at run time by krex_runtime/node/native_build.py, and krex_runtime/_configs/
with the default config and the systemd unit (krex_runtime/node/shipped.py).
An editable install copies nothing: a checkout uses native/build, which scripts/setup.sh builds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# What a wheel carries, relative to the native build folder and to krex_runtime/_native.
ARTEFACTS = {
    "libkrex.so": "libkrex.so", "sim/libcuda.so.1": "sim/libcuda.so.1",
    "libkrex_hip.so": "libkrex_hip.so", "sim/libamdhip64.so.5": "sim/libamdhip64.so.5",
    "forward/libcuda.so.1": "forward/libcuda.so.1", "krex-ctxd": "krex-ctxd",
}
# Built only where the HIP headers are (native/hip.mk): an NVIDIA-only wheel goes without them.
OPTIONAL = {"libkrex_hip.so", "sim/libamdhip64.so.5"}
HEADERS = ("krex.h",)


def cuda_include() -> Path:
    """The headers of the nvidia-cuda-runtime build requirement (build_backend/krex_build.py)."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "nvidia" / "cu13" / "include"
        if (candidate / "cuda.h").is_file() and (candidate / "cudaTypedefs.h").is_file():
            return candidate
    sys.exit(
        "krex build: cuda.h not found in the build environment; build with build isolation "
        "(pip wheel ., python -m build) so that nvidia-cuda-runtime is installed for the build"
    )


def build_native(into: Path) -> None:
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    with tempfile.TemporaryDirectory(prefix="krex-native-") as build:
        subprocess.run(
            ["make", "-s", "-C", str(HERE / "native"), f"-j{jobs}", "all",
             f"BUILD={build}", f"CUDA_INCLUDE={cuda_include()}", f"PYTHON={sys.executable}"],
            check=True,
        )
        for source, target in ARTEFACTS.items():
            if source in OPTIONAL and not (Path(build) / source).exists():
                continue
            (into / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(build) / source, into / target)
        # Forwarded mode's CUDA runtime, named after the headers' major version (native/cudart.mk).
        for runtime in (Path(build) / "forward").glob("libcudart.so.*"):
            shutil.copy2(runtime, into / "forward" / runtime.name)
    (into / "include").mkdir(parents=True, exist_ok=True)
    for header in HEADERS:
        shutil.copy2(HERE / "native" / "include" / header, into / "include" / header)


# The default config and the systemd unit, for `krex config default|unit`
# (krex_runtime/node/shipped.py): configs/ stays their one copy.
SHIPPED = {"default.toml": "configs/default.toml", "krex-runtime.service": "configs/systemd/krex-runtime.service"}


def copy_shipped(into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for name, source in SHIPPED.items():
        shutil.copy2(HERE / source, into / name)


class build_py_with_native(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            build_native(Path(self.build_lib) / "krex_runtime" / "_native")
            copy_shipped(Path(self.build_lib) / "krex_runtime" / "_configs")


class NativeDistribution(Distribution):
    """Platform-specific: the wheel holds ELF libraries (platlib, a platform tag)."""

    def has_ext_modules(self) -> bool:
        return True


class native_wheel(bdist_wheel):
    """The libraries are loaded with ctypes and LD_PRELOAD, not as a CPython
    extension, so the wheel fits any Python 3 on its platform (py3-none-PLATFORM)."""

    def get_tag(self) -> tuple[str, str, str]:
        return "py3", "none", super().get_tag()[2]


setup(distclass=NativeDistribution, cmdclass={"build_py": build_py_with_native, "bdist_wheel": native_wheel})
