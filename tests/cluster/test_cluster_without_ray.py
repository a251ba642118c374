"""`krex-cluster` where the `cluster` extra (Ray) is not installed: `head`
says in one line how to install it, never a ModuleNotFoundError traceback,
and `--version` works. Ray is hidden from a subprocess (tests/packaging runs
the same from a wheel installed without the extra)."""

from __future__ import annotations

import subprocess
import sys

from krex_runtime.testing.local_runtime import command

WITHOUT_RAY = "import sys; sys.modules['ray'] = None; from krex_cluster.main import main; sys.exit(main(sys.argv[1:]))"


def test_head_without_ray_names_the_extra_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_RAY, "head"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 125 and done.stdout == ""
    assert done.stderr == "krex-cluster: the cluster gateway needs Ray: pip install 'krex-runtime[cluster]'\n", done.stderr


def test_version_exits_zero() -> None:
    done = subprocess.run([*command("krex-cluster"), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("krex-cluster "), done
