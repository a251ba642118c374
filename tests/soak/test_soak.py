"""A short soak (benchmarks/soak.py): load on two simulated GPUs with every kind
of fault injected (floods and a filling disk included); every command
accounted for, nothing leaked or left frozen."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from runtime_helpers import REPO

SOAK = REPO / "benchmarks" / "soak.py"


def _fault_kinds() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("soak_faults", SOAK.with_name("soak_faults.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TENANT_FAULTS + module.NODE_FAULTS + module.RESTART_FAULTS


def test_short_soak_accounts_for_every_command_and_leaks_nothing(tmp_path: Path, native_built: Path) -> None:
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, str(SOAK), "--duration", "28", "--fault-every", "2", "--pause-ms", "3000",
         "--sample-every", "2", "--root", str(tmp_path / "soak"), "--json", str(out)],
        capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["ok"] and result["failures"] == []
    kinds = [k for k in _fault_kinds() if k != "fill_disk" or result["disk"] == "tmpfs"]  # a tmpfs needs root
    assert all(result["faults"].get(kind, 0) >= 1 for kind in kinds), result["faults"]
    assert result["flood_status_s"]["count"] >= 1  # status answered during a flood
    assert "missing" not in result["outcomes"] and "unknown" not in result["outcomes"]
    assert sum(result["outcomes"].values()) == result["submitted"] > 0
    assert result["outcomes"].get("ended by restart", 0) > 0  # the SIGKILLed runtime had work in flight
    assert result["runtime_starts"] == 3
    assert len(result["rss_samples"]) >= 3
    assert "RESULT: ok" in done.stdout
