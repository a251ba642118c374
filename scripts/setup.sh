#!/usr/bin/env bash
# Prepare a checkout: a virtual environment in .venv with KREX and its test
# tools installed, and the native libraries built. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: KREX needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
for tool in make cc; do
  command -v "$tool" >/dev/null || { echo "setup: '$tool' is needed to build native/ (apt-get install build-essential)" >&2; exit 1; }
done

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
# A checkout set up before the distribution was named krex-runtime has the old
# name installed too; it would shadow the new one's metadata.
if compgen -G '.venv/lib/python3*/site-packages/krex-*.dist-info' >/dev/null; then
  .venv/bin/python -m pip uninstall -q -y krex
fi
# The install is editable: the code needs no reinstall, only a changed
# pyproject.toml (dependencies, commands) does. Reinstalling rewrites the
# commands in .venv/bin, under anything running them meanwhile (the demo's
# test runs this script while other tests run `krex`), so it runs only then.
stamp=.venv/.krex-pyproject.sha256
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x .venv/bin/krex ] ||
  ! .venv/bin/python -c 'import importlib.metadata as m; m.version("krex-runtime")' 2>/dev/null; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,cluster]'
  echo "$want" >"$stamp"
fi
# native/ needs cuda.h (prototypes only; nothing links CUDA). Without a CUDA
# toolkit, take the headers from NVIDIA's runtime wheel into the venv.
if [ -z "${CUDA_INCLUDE:-}" ] && [ ! -f /usr/local/cuda/include/cuda.h ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check 'nvidia-cuda-runtime>=13,<14'
fi
# native/ builds the HIP interception library against the real HIP headers
# (prototypes only; nothing links ROCm): Debian's libamdhip64-dev, or a ROCm
# install (HIP_INCLUDE=/opt/rocm/include).
if [ -z "${HIP_INCLUDE:-}" ] && [ ! -f /usr/include/hip/hip_runtime_api.h ] && [ ! -f /opt/rocm/include/hip/hip_runtime_api.h ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libamdhip64-dev >/dev/null
  else
    echo "setup: native/ needs the HIP headers: apt-get install libamdhip64-dev (as root), or set HIP_INCLUDE" >&2
    exit 1
  fi
fi
make -s -C native all
make -s -C native asan
