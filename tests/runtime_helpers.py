"""Helpers shared by the runtime tests (kept out of conftest.py, whose module
name is not unique across the test folders)."""

from __future__ import annotations

from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent


def tenant_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes started by the runtime of `run_dir` (by their KREX_RUN_DIR)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("KREX_RUN_DIR") == str(run_dir) and proc.status() != psutil.STATUS_ZOMBIE:
                if "KREX_COMMAND_ID" in proc.environ():
                    found.append(proc)
        except psutil.Error:
            continue
    return found
