"""The layering is enforced by import-linter's contracts (pyproject.toml,
[tool.importlinter]), not by a list in a test: the console sees only the
wire, tenant code only the standard library, the wire no service module, the
runtime never the console, krex_bench only the public surface (and nothing
imports krex_bench), regions and commands side by side on the host plumbing,
no worker pool importing the dispatcher, the command modes side by side,
no import circles among the siblings of any package of the console or the
runtime.

The real tree must keep every contract, and a module that breaks one must be
caught: the checker runs over a copy of the packages with such a module added.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("krex_runtime", "krex_console", "krex_bench")
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LINT, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )


def test_the_tree_keeps_every_contract() -> None:
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


# case: (the module added, its source, the contract it breaks, what the report
# names: the module itself, or for a circle the siblings it ties)
BAD_MODULES = {
    "console reaches into the region manager": (
        "krex_console/bad_view.py", "from krex_runtime.regions import region_manager\n",
        "The console sees the runtime only through the wire",
    ),
    "tenant code imports zmq": (
        "krex_runtime/tenant/bad_helper.py", "import zmq\n",
        "Tenant code uses the standard library only",
    ),
    "the wire imports the dispatcher": (
        "krex_runtime/wire/bad_reply.py", "from krex_runtime.commands import dispatcher\n",
        "The wire imports no service module",
    ),
    "regions import the service": (
        "krex_runtime/regions/bad_hook.py", "from krex_runtime.service import runtime\n",
        "The runtime's parts stand in layers",
    ),
    "regions import the dispatcher": (
        "krex_runtime/regions/bad_admission.py", "from krex_runtime.commands import dispatcher\n",
        "Regions and commands stand side by side",
    ),
    "a worker pool imports the dispatcher": (
        "krex_runtime/commands/pooled/bad_pump.py", "from krex_runtime.commands import dispatcher\n",
        "No worker pool imports the dispatcher",
    ),
    "one mode imports another": (
        "krex_runtime/commands/forked/bad_borrow.py", "from krex_runtime.commands.pooled import pooled_worker\n",
        "The modes stand side by side on the worker-pool base",
    ),
    "the host plumbing imports the regions": (
        "krex_runtime/host/bad_registry.py", "from krex_runtime.regions import region_manager\n",
        "The runtime's parts stand in layers",
    ),
    "the runtime imports the console": (
        "krex_runtime/telemetry/bad_panel.py", "import krex_console.format\n",
        "The runtime never imports the console",
    ),
    "the CLI imports the benchmark tool": (
        "krex_runtime/cli/bad_bench.py", "from krex_bench.cli import main\n",
        "Nothing imports krex_bench",
    ),
    "a console view imports the app": (
        "krex_console/views/bad_view.py", "from krex_console.app import KrexConsole\n",
        "No import circles in the console, the runtime or the cluster layer", ".views -> .app",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MODULES))
def test_a_violating_import_is_caught(tmp_path: Path, case: str) -> None:
    where, source, contract, *named = BAD_MODULES[case]
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / where).write_text(source)
    done = lint(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in " ".join(broken.split()), done.stdout
    assert (named[0] if named else Path(where).stem) in done.stdout
