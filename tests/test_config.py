"""Config files: strict, typed, one clear line for every mistake."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from runtime_helpers import REPO

from krex_runtime.testing import hygiene
from krex_runtime.node.config import Config, ConfigError, load_config
from krex_runtime.testing.local_runtime import command


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_configs_load(path: Path) -> None:
    config = load_config(path)
    assert config.source == str(path)


def test_default_file_matches_the_built_in_defaults() -> None:
    from dataclasses import replace

    assert replace(load_config(REPO / "configs" / "default.toml"), source="") == replace(Config(), source="")


def test_every_field_is_documented() -> None:
    import dataclasses

    doc = (REPO / "docs" / "configuration.md").read_text()
    for section in dataclasses.fields(Config):
        if section.name == "source":
            continue
        for f in dataclasses.fields(getattr(Config(), section.name)):
            assert f"`{section.name}.{f.name}`" in doc, f"{section.name}.{f.name} is not documented"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return path


def test_unknown_key_names_file_key_and_closest(tmp_path: Path) -> None:
    path = _write(tmp_path, "[dispatcher]\nslots_per_gpus = 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: dispatcher.slots_per_gpus: unknown key (did you mean 'slots_per_gpu'?)"


def test_unknown_section(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"dispatch: unknown key \(did you mean 'dispatcher'\?\)"):
        load_config(_write(tmp_path, "[dispatch]\nslots_per_gpu = 3\n"))


@pytest.mark.parametrize(
    "text, message",
    [
        ("[dispatcher]\nslots_per_gpu = 'four'\n", "dispatcher.slots_per_gpu: expected an integer, got a string"),
        ("[dispatcher]\nslots_per_gpu = true\n", "dispatcher.slots_per_gpu: expected an integer, got a boolean"),
        ("[runtime]\npolicy = 'fast'\n", "runtime.policy: expected one of 'command', 'ungated', 'krex', got 'fast'"),
        ("[dispatcher]\nslots_per_gpu = 0\n", "dispatcher.slots_per_gpu must be at least 1"),
        ("[gpus]\nvisible = [0, 'one']\n", "gpus.visible[1]: expected an integer, got a string"),
        ("[tenants]\nenv = { A = 1 }\n", "tenants.env.A: expected a string, got an integer"),
        ("[runtime]\ncontrol_tcp = 'ipc:///x'\n", "runtime.control_tcp must be a tcp:// endpoint"),
        (
            "[regions]\nchannel_max_connections = 8\nchannel_max_connections_per_uid = 9\n",
            "regions.channel_max_connections_per_uid must be between 1 and regions.channel_max_connections",
        ),
        ("[dispatcher]\ndefault_mode = 'forked'\n", 'dispatcher.default_mode = "forked" needs the zygotes (pool.zygote = true)'),
        ("[dispatcher]\ndefault_mode = 'pooled'\n", 'needs a context pool (pool.size_per_gpu >= 1)'),
        ("[dispatcher]\ndefault_mode = 'fork'\n", "dispatcher.default_mode: expected one of 'process', 'forked', 'pooled'"),
        ("runtime = 3\n", "runtime: expected a table, got an integer"),
        ("[runtime\n", "not valid TOML"),
    ],
)
def test_bad_values(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, text))
    assert message in str(err.value)
    assert str(_write(tmp_path, text)) in str(err.value)


def test_runtime_reports_a_broken_config_in_one_line(tmp_path: Path) -> None:
    before = hygiene.baseline()
    run_dir, lock_dir = tmp_path / "run", tmp_path / "locks"
    text = f"[runtime]\nrun_dir = '{run_dir}'\nlock_dir = '{lock_dir}'\n[tenants]\npreloads = false\n"
    path = _write(tmp_path, text)
    done = subprocess.run([*command("krex-runtime"), "--config", str(path), "--sim", "1"], capture_output=True, text=True)
    assert done.returncode == 125
    assert done.stderr.strip() == f"krex-runtime: {path}: tenants.preloads: unknown key (did you mean 'preload'?)"
    assert hygiene.leftovers(run_dir, lock_dir, before) == [] and not run_dir.exists()


def test_missing_config_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [*command("krex-runtime"), "--config", str(tmp_path / "nope.toml")], capture_output=True, text=True
    )
    assert done.returncode == 125
    assert done.stderr.strip() == f"krex-runtime: {tmp_path / 'nope.toml'}: config file not found"


def test_no_gpu_suggests_sim(tmp_path: Path) -> None:
    path = _write(tmp_path, f"[runtime]\nrun_dir = '{tmp_path}/run'\nlock_dir = '{tmp_path}/locks'\n")
    done = subprocess.run([*command("krex-runtime"), "--config", str(path)], capture_output=True, text=True, timeout=60)
    if done.returncode == 0:
        pytest.skip("this machine has a GPU")
    assert done.returncode == 125
    assert "--sim" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_endpoint_the_runtime_cannot_serve_is_one_line(tmp_path: Path) -> None:
    # A run folder whose socket paths do not fit a Unix socket address (108 bytes).
    run_dir = tmp_path / ("r" * 60) / ("u" * 60)
    path = _write(
        tmp_path,
        f"[runtime]\nrun_dir = '{run_dir}'\nlock_dir = '{tmp_path}/locks'\n[tenants]\nallow_root = true\n",
    )
    done = subprocess.run([*command("krex-runtime"), "--config", str(path), "--sim", "1"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 125
    assert done.stderr.strip().startswith(f"krex-runtime: cannot serve on ipc://{run_dir}/"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_more_simulated_gpus_than_the_simulator_has(tmp_path: Path) -> None:
    path = _write(tmp_path, f"[runtime]\nrun_dir = '{tmp_path}/run'\nlock_dir = '{tmp_path}/locks'\n[gpus]\nsimulated = 17\n")
    done = subprocess.run([*command("krex-runtime"), "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 125
    assert done.stderr.strip() == (
        "krex-runtime: 17 simulated GPUs asked for (gpus.simulated or --sim); the simulator has at most 16"
    )


def test_runtime_takes_its_config_from_KREX_CONFIG(tmp_path: Path) -> None:
    path = _write(tmp_path, "[tenants]\npreloads = false\n")
    env = {**os.environ, "KREX_CONFIG": str(path)}
    done = subprocess.run([*command("krex-runtime"), "--sim", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 125
    assert done.stderr.strip() == f"krex-runtime: {path}: tenants.preloads: unknown key (did you mean 'preload'?)"
    # --config wins over the variable
    other = tmp_path / "missing.toml"
    done = subprocess.run([*command("krex-runtime"), "--config", str(other)], capture_output=True, text=True, env=env, timeout=60)
    assert done.stderr.strip() == f"krex-runtime: {other}: config file not found"


def test_runtime_usage_error_and_version() -> None:
    done = subprocess.run([*command("krex-runtime"), "--no-such-option"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 125
    assert "unrecognized arguments: --no-such-option" in done.stderr
    done = subprocess.run([*command("krex-runtime"), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert re.fullmatch(r"krex-runtime \d+\.\d+\.\d+\S*\n", done.stdout), done.stdout
