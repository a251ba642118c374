"""`krex-runtime --check-config FILE` refuses what a start with FILE refuses
before it claims anything of the node (issue 47, F12): it once said `valid`
for `gpus.simulated = 1000` and for a `tenants.uid_range` over existing
accounts, both of which a start refuses in one line. Each case here is
started for real, and check-config must give the start's own line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from krex_runtime.testing.local_runtime import command

ROOT = os.geteuid() == 0

CASES = {
    "too_many_simulated": ("[gpus]\nsimulated = 1000\n", "1000 simulated GPUs asked for"),
    "unknown_user": ('[gpus]\nsimulated = 1\n[tenants]\nuser = "no-such-krex-user"\n',
                     "tenants.user names an unknown user 'no-such-krex-user'"),
}
if ROOT:
    CASES |= {
        "range_over_accounts": ('[gpus]\nsimulated = 1\n[tenants]\nuid_range = [1, 10]\ngroup = "60999"\n',
                                "tenants.uid_range 1..10 holds the account 'daemon'"),
        "range_too_small": ('[gpus]\nsimulated = 2\n[dispatcher]\nslots_per_gpu = 2\n'
                            '[tenants]\nuid_range = [61000, 3]\ngroup = "60999"\n',
                            "tenants.uid_range has 3 uids, fewer than the 4 tenants"),
    }


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_config_refuses_what_a_start_refuses(tmp_path: Path, native_built: Path, case: str) -> None:
    text, says = CASES[case]
    config = tmp_path / f"{case}.toml"
    run_dir = tmp_path / "run"
    config.write_text(f'[runtime]\nrun_dir = "{run_dir}"\nlock_dir = "{tmp_path / "locks"}"\n'
                      f'trace_path = "{tmp_path / "trace.jsonl"}"\n' + text)
    checked = _run(*command("krex-runtime"), "--check-config", str(config))
    # Checking claims nothing and makes nothing of the node's.
    assert not run_dir.exists() and not (tmp_path / "locks").exists()
    started = _run(*command("krex-runtime"), "--config", str(config))
    assert started.returncode == 125 and len(started.stderr.strip().splitlines()) == 1, started.stderr
    assert says in started.stderr, started.stderr
    refusal = started.stderr.strip().removeprefix("krex-runtime: ")
    assert checked.returncode == 125 and checked.stdout == "", checked
    assert checked.stderr == f"krex-runtime: {config}: {refusal}\n", (checked.stderr, refusal)


def test_a_config_a_start_takes_checks_valid(tmp_path: Path, native_built: Path) -> None:
    config = tmp_path / "fine.toml"
    config.write_text(f'[runtime]\nrun_dir = "{tmp_path / "run"}"\n[gpus]\nsimulated = 16\n')
    checked = _run(*command("krex-runtime"), "--check-config", str(config))
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, f"{config}: valid\n", ""), checked
