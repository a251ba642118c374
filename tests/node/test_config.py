"""Config files: strict, typed, one clear line for every mistake."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from runtime_helpers import REPO

from krex_runtime.node.config import Config, ConfigError, load_config
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import command, wait_until


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


AMD_NEEDS_PRELOAD = 'regions.gate_backend = "driver-lock" is NVIDIA\'s checkpoint lock; AMD GPUs need "preload"'


@pytest.mark.parametrize(
    "text, message",
    [
        ("[dispatcher]\nslots_per_gpu = 'four'\n", "dispatcher.slots_per_gpu: expected an integer, got a string"),
        ("[dispatcher]\nslots_per_gpu = true\n", "dispatcher.slots_per_gpu: expected an integer, got a boolean"),
        ("[runtime]\npolicy = 'fast'\n", "runtime.policy: expected one of 'command', 'ungated', 'krex', got 'fast'"),
        ("[dispatcher]\nslots_per_gpu = 0\n", "dispatcher.slots_per_gpu must be between 1 and 1024"),
        ("[gpus]\nvisible = [0, 'one']\n", "gpus.visible[1]: expected an integer, got a string"),
        ("[tenants]\nenv = { A = 1 }\n", "tenants.env.A: expected a string, got an integer"),
        ("[runtime]\ncontrol_tcp = 'ipc:///x'\n", "runtime.control_tcp must be a tcp:// endpoint"),
        (
            "[regions]\nchannel_max_connections = 8\nchannel_max_connections_per_uid = 9\n",
            "regions.channel_max_connections_per_uid must be between 1 and regions.channel_max_connections",
        ),
        ("[dispatcher]\ndefault_mode = 'forked'\n", 'dispatcher.default_mode = "forked" needs the zygotes (pool.zygote = true)'),
        ("[dispatcher]\ndefault_mode = 'pooled'\n", 'needs a context pool (pool.size_per_gpu >= 1)'),
        # The driver's checkpoint lock is NVIDIA's: an AMD GPU (real or simulated) has none.
        ("[regions]\ngate_backend = 'driver-lock'\n[gpus]\nvendor = 'amd'\n", AMD_NEEDS_PRELOAD),
        ("[regions]\ngate_backend = 'driver-lock'\n[gpus]\nsimulated_amd = 1\n", AMD_NEEDS_PRELOAD),
        ("[dispatcher]\ndefault_mode = 'fork'\n", "dispatcher.default_mode: expected one of 'process', 'forked', 'pooled'"),
        ("runtime = 3\n", "runtime: expected a table, got an integer"),
        ("[eval]\nmax_compiles = -1\n", "eval.max_compiles must be between 0 and 4096"),
        ("[eval]\ncompile_jobs = 0\n", "eval.compile_jobs must be between 1 and 1024"),
        ("[eval]\ncompile_jobs = 'many'\n", "eval.compile_jobs: expected an integer, got a string"),
        ("[eval]\nmax_compile = 2\n", "eval.max_compile: unknown key (did you mean 'max_compiles'?)"),
        ("[eval]\nbuild_dir = 'builds'\n", "eval.build_dir must be an absolute path"),
        ("[eval]\nbuild_dir = '/proc/builds'\n", "eval.build_dir = '/proc/builds' is in /proc"),
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
    before = hygiene.baseline()
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
    # Start-up is one transaction: the claims, the cgroup slice, the sockets bound so far are released.
    assert hygiene.leftovers(run_dir, tmp_path / "locks", before) == []


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


# --- bounds, malformed TOML, the tenants' user ---------------------------------------------------


def _numeric_keys() -> list[str]:
    import dataclasses
    import typing

    keys = []
    for section in dataclasses.fields(Config):
        if section.name == "source":
            continue
        for f in dataclasses.fields(getattr(Config(), section.name)):
            kind = typing.get_type_hints(type(getattr(Config(), section.name)))[f.name]
            key = f"{section.name}.{f.name}"
            if kind in (int, float):
                keys.append(key)
            elif int in typing.get_args(kind) or list[int] in typing.get_args(kind):
                keys.append(f"{key}[]")  # a list (or a table of lists) of numbers
    return keys


def test_every_numeric_key_has_a_documented_range() -> None:
    from krex_runtime.node.config.bounds import BOUNDS, shown_number

    assert sorted(_numeric_keys()) == sorted(BOUNDS)
    doc = (REPO / "docs" / "configuration.md").read_text()
    for key, (lo, hi) in BOUNDS.items():
        assert f"| `{key}` | {shown_number(lo)} | {shown_number(hi)} |" in doc, f"{key}: its range is not in docs/configuration.md"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[pool]\nsize_per_gpu = 100000\n", "pool.size_per_gpu must be between 0 and 64"),
        ("[regions]\nheartbeat_interval_s = 1e-9\n", "regions.heartbeat_interval_s must be between 0.01 and 10"),
        ("[dispatcher]\nslots_per_gpu = 100000\n", "dispatcher.slots_per_gpu must be between 1 and 1024"),
        ("[telemetry]\nsample_interval_s = 0.0001\n", "telemetry.sample_interval_s must be between 0.01 and 3600"),
        ("[gpus]\nvisible = [0, 5000]\n", "gpus.visible[1] must be between 0 and 1023"),
        ("[regions.cpu_slices]\n0 = [1, -2]\n", "regions.cpu_slices.0[1] must be between 0 and 65535"),
        ("[runtime]\ntrace_rotate_bytes = 100\n", "runtime.trace_rotate_bytes must be 0 (never rotate) or at least 4096"),
        ("[runtime]\nmax_requests_per_peer = 2000\n", "runtime.max_requests_per_peer must be at most runtime.max_requests_in_flight"),
        ("[regions]\nchannel_idle_timeout_s = 0.0\n", "regions.channel_idle_timeout_s must be between 0.1 and 86400"),
        ("[regions]\nchannel_max_connections_per_tenant = 0\n", "regions.channel_max_connections_per_tenant must be between 1 and 65536"),
    ],
)
def test_numbers_that_would_hurt_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, text))
    assert str(err.value) == f"{tmp_path / 'bad.toml'}: {message}"


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 2000 + "]" * 2000 + "\n",
        "x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n",
        "[runtime]\npolicy = 'krex\n",
        "[runtime]\n[runtime]\n",
        "a = 1\na = 2\n",
        "[runtime]\nsnapshot_interval_s = 1.0.0\n",
        "= 1\n",
        "[[runtime]]\n",
    ],
    ids=["deep-array", "deep-table", "open-string", "table-twice", "key-twice", "bad-number", "no-key", "array-of-tables"],
)
def test_any_malformed_toml_is_one_line(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    done = subprocess.run([*command("krex-runtime"), "--config", str(path), "--sim", "1"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 125
    assert done.stderr.startswith(f"krex-runtime: {path}: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_tenant_user_that_cannot_run_the_runtimes_python_is_refused_at_start(tmp_path: Path) -> None:
    import os
    import pwd
    import sys

    if os.geteuid() != 0:
        pytest.skip("tenants.user needs a runtime started as root")
    nobody = pwd.getpwnam("nobody")
    # The runtime's Python reached through a folder only root may enter (pytest's
    # own tmp folder): the tenants' user cannot even execute it.
    assert (tmp_path.stat().st_mode & 0o005) == 0 or not os.access(tmp_path, os.X_OK)
    venv = tmp_path / "venv"
    venv.symlink_to(Path(sys.prefix))
    before = hygiene.baseline()
    run_dir, lock_dir = tmp_path / "run", tmp_path / "locks"
    path = _write(
        tmp_path,
        f"[runtime]\nrun_dir = '{run_dir}'\nlock_dir = '{lock_dir}'\n[tenants]\nuser = 'nobody'\n[telemetry]\ncanary = true\n",
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "krex_runtime.main", "--config", str(path), "--sim", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 125, done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"krex-runtime: tenants.user 'nobody' cannot run the runtime's Python {venv}/bin/python: "), line
    assert len(line.splitlines()) == 1, line
    assert hygiene.leftovers(run_dir, lock_dir, before) == []
    assert nobody.pw_uid != 0


# --- values no type can refuse: the kernel's trees, cores, labels, root's group ------------------

_NO_CORE = max(os.sched_getaffinity(0)) + 1  # one past the last core this process may use


@pytest.mark.parametrize(
    "text, message",
    [
        ("[tenants]\noutput_dir = '/proc'\n", "tenants.output_dir = '/proc' is in /proc, a file system of the "
         "kernel's that keeps no files of ours (/proc, /sys and /dev are refused, /dev/shm aside)"),
        ("[tenants]\noutput_dir = '/sys/fs/x'\n", "tenants.output_dir = '/sys/fs/x' is in /sys,"),
        ("[tenants]\noutput_dir = '/dev/../dev/krex'\n", "tenants.output_dir = '/dev/../dev/krex' (that is '/dev/krex') is in /dev,"),
        ("[runtime]\nrun_dir = '/proc/krex'\n", "runtime.run_dir = '/proc/krex' is in /proc,"),
        ("[runtime]\nlock_dir = '/dev'\n", "runtime.lock_dir = '/dev' is in /dev,"),
        (f"[regions.cpu_slices]\n0 = [0, {_NO_CORE}]\n",
         f"regions.cpu_slices.0 names core {_NO_CORE}, not one of this machine's cores the runtime may use ("),
        ("[runtime.labels]\nzone = \"a\\nb\"\n", "runtime.labels.'zone': names and values may hold only printable "
         "characters (no newline or other control character)"),
        ("[runtime.labels]\n\"zo\\tne\" = \"a\"\n", "runtime.labels.'zo\\tne': names and values"),
        ("[tenants]\nuser = 'root'\nuid_range = [70000, 64]\ngroup = 'krex'\n", "tenants.user = 'root' with "
         "tenants.uid_range would put every tenant in root's group: name an unprivileged account or only "
         "tenants.group, or set tenants.allow_root = true"),
    ],
    ids=["proc", "sys", "dev-dotdot", "run-dir", "lock-dir", "no-such-core", "label-newline", "label-name-tab", "root-range"],
)
def test_values_this_node_cannot_use_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, text))
    assert str(err.value).startswith(f"{tmp_path / 'bad.toml'}: {message}"), str(err.value)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize(
    "text",
    [
        "[tenants]\noutput_dir = '/dev/shm/krex-output'\n",  # a tmpfs like any other
        "[tenants]\nuser = 'root'\nuid_range = [70000, 64]\ngroup = 'krex'\nallow_root = true\n",
        "[regions.cpu_slices]\n0 = [0]\n",
        "[runtime.labels]\nzone = \"été-a\"\n",
    ],
    ids=["dev-shm", "root-range-allowed", "core-0", "label-unicode"],
)
def test_what_those_checks_still_accept(tmp_path: Path, text: str) -> None:
    load_config(_write(tmp_path, text))


@pytest.mark.parametrize(("policy", "slots"), [("command", 1), ("ungated", 5), ("krex", 5)])
def test_the_slot_rule_is_the_configs(tmp_path: Path, policy: str, slots: int) -> None:
    """One rule, read by the dispatcher, the node's GPU record and the uid count:
    policy `command` runs one command per GPU whatever dispatcher.slots_per_gpu says."""
    path = tmp_path / "krex.toml"
    path.write_text(f'[runtime]\npolicy = "{policy}"\n[dispatcher]\nslots_per_gpu = 5\n')
    assert load_config(path).effective_slots_per_gpu == slots


# --- where a runtime serves, and on which simulated device ----------------------------------------


def test_runtimes_with_run_dirs_of_their_own_never_share_a_simulated_device_and_honour_KREX_RUN_DIR(
        tmp_path: Path, native_built: Path) -> None:
    """Two runtimes started as a user would (`krex-runtime --sim 1`, no device
    named): one in KREX_RUN_DIR, one in its config's run_dir. Both serve (the
    simulated device is the run dir's own), and `krex` with the same
    KREX_RUN_DIR finds the first: the runtime looks where its clients look."""
    before = hygiene.baseline()
    lock_dir = tmp_path / "locks"
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_cfg = _write(tmp_path, f"[runtime]\nlock_dir = '{lock_dir}'\n[tenants]\nallow_root = true\n")
    second_cfg = tmp_path / "second.toml"
    second_cfg.write_text(f"[runtime]\nrun_dir = '{second_dir}'\nlock_dir = '{lock_dir}'\n[tenants]\nallow_root = true\n")
    env = {**os.environ, "KREX_RUN_DIR": str(first_dir)}
    procs = []
    try:
        for cfg in (first_cfg, second_cfg):
            procs.append(subprocess.Popen([*command("krex-runtime"), "--config", str(cfg), "--sim", "1"], env=env,
                                          stderr=subprocess.PIPE, text=True))
            served = first_dir if cfg == first_cfg else second_dir
            wait_until(lambda served=served: procs[-1].poll() is not None or (served / "control.sock").exists(), 60, "a runtime")
            assert procs[-1].poll() is None, procs[-1].communicate()[1]
        done = subprocess.run([*command("krex"), "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["trace"] == str(first_dir / "trace.jsonl")
    finally:
        for proc in procs:
            proc.terminate()
    errs = [proc.communicate(timeout=60)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errs
    # The one whose config names another run dir says where its clients will look instead.
    assert f"KREX_RUN_DIR={first_dir} here, where krex and krex-console will look; this runtime serves in {second_dir}" in errs[1], errs[1]
    assert "KREX_RUN_DIR" not in errs[0], errs[0]
    assert hygiene.leftovers(first_dir, lock_dir, before) == [] and hygiene.leftovers(second_dir, lock_dir, before) == []
