"""The runtime never loads the cluster layer or Ray: a node's runtime, its
CLI and the Python API stay as they are without the `cluster` extra."""

from __future__ import annotations

import subprocess
import sys


def test_the_runtime_and_its_clients_load_neither_ray_nor_the_cluster_layer() -> None:
    probe = (
        "import sys, krex_runtime.main, krex_runtime.cli, krex_runtime.api.sync, krex_runtime.api.aio, krex_console.app\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'krex_cluster'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
