"""KREX's build backend: setuptools, and NVIDIA's CUDA runtime wheel as a
requirement of building a wheel.

native/ compiles against cuda.h and cudaTypedefs.h for the exact driver
prototypes (nothing links CUDA), and forwarded mode's libcudart against
cuda_runtime_api.h, which needs the C runtime's headers (crt/). A wheel
takes them from NVIDIA's nvidia-cuda-runtime and nvidia-cuda-crt wheels
installed into the isolated build environment, so
it builds the same with or without a CUDA toolkit on the building machine.
An editable install builds no native code (scripts/setup.sh runs make into
native/build), so it does not need the headers and stays quick.
"""

from __future__ import annotations

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 hooks, unchanged)

CUDA_HEADERS = ["nvidia-cuda-runtime>=13,<14", "nvidia-cuda-crt>=13,<14"]


def get_requires_for_build_wheel(config_settings=None):
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *CUDA_HEADERS]
