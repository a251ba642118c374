"""Forked and pooled mode on a real GPU with torch preloaded: the zygote is
safe to fork from after `import torch` (and triton where installed), and no
change made by one command (tf32, cudnn.benchmark, default dtype, matmul
precision, a monkeypatched F.gelu, a builtins attribute, the torch.rand
stream) reaches a later one. Runs benchmarks/isolation_probe.py, which prints
its table. Skipped without a GPU (marker `gpu`).

    python -m pytest -m gpu tests/gpu/test_gpu_isolation.py -s
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from runtime_helpers import REPO

pytestmark = pytest.mark.gpu


def test_no_isolation_failure_with_torch(native_built: object) -> None:
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "isolation_probe.py"), "--probes", "3"],
        env=env, capture_output=True, text=True, timeout=1800,
    )
    print(done.stdout, done.stderr[-3000:])
    assert "zygote: ready" in done.stdout, done.stdout
    assert done.returncode == 0 and "RESULT: no isolation failure" in done.stdout, done.stdout
