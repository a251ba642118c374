"""The behaviours a command has from outside, for each mode: process, forked, pooled.

One runtime for the module (policy krex, one simulated GPU, a context pool
and a zygote), so each mode meets the same regions, cgroups and leases. Exit
codes, signals and output are compared mode against mode in
tests/commands/test_pool.py (`..._look_like_process_mode_from_outside`), and the
500-command fault test runs for pooled and forked there too.
"""

from __future__ import annotations

import json
import signal
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import (
    PY,
    TENANTS,
    all_gone,
    module_runtime,
    pool_and_zygote_ready,
    regions_config,
    trace_events,
    tree_pids,
)

from krex_runtime.testing.local_runtime import Runtime, wait_until

MODES = ("process", "forked", "pooled")


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    pool = '\n[pool]\nsize_per_gpu = 2\npreload = ["krex_runtime.sim.simcuda"]\nzygote = true\n'
    for runtime in module_runtime(tmp_path_factory.mktemp("modes") / "rt", sim=1, policy="krex", slots=4,
                                  extra_config=regions_config() + pool):
        wait_until(lambda rt=runtime: pool_and_zygote_ready(rt, 2), 60, "the pool and the zygote to be ready")
        yield runtime


def run_json(rt: Runtime, mode: str, *argv: str, options: tuple[str, ...] = ()) -> tuple[Any, dict[str, Any]]:
    """`krex run --json`: one document, the command's output inside it."""
    done = rt.krex("run", "--mode", mode, "--json", *options, "--", *argv)
    result = json.loads(done.stdout)
    seen = types.SimpleNamespace(
        returncode=done.returncode, stdout=result.get("stdout", ""), stderr=result.get("stderr", "") + done.stderr
    )
    return seen, result


IDENTITY = (
    "import os\n"
    "cgroup = open('/proc/self/cgroup').read().strip().rsplit('/', 1)[-1]\n"
    "print(os.environ['KREX_COMMAND_ID'], os.environ['KREX_TENANT_ID'], cgroup)\n"
)


@pytest.mark.parametrize("mode", MODES)
def test_a_command_runs_as_itself_in_its_own_cgroup(rt: Runtime, mode: str) -> None:
    tenants = []
    for _ in range(2):
        done, result = run_json(rt, mode, PY, "-c", IDENTITY)
        assert done.returncode == 0, done.stderr
        command_id, tenant, cgroup = done.stdout.splitlines()[0].split()
        assert command_id == result["id"]
        started = next(e for e in trace_events(rt, "command_started") if e["id"] == result["id"])
        assert int(tenant) == started["tenant_id"]
        # A context process is its own cgroup and tenant; a process or forked command has one of each.
        assert cgroup == (result["worker"] if mode == "pooled" else f"cmd-{result['id']}"), cgroup
        tenants.append(int(tenant))
    if mode != "pooled":
        assert tenants[0] != tenants[1]


def _tree(pid_dir: Path) -> str:
    """A command whose main process, child and setsid grandchild ignore SIGTERM and record their pids."""
    return (
        "import os, signal, subprocess, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "keep = \"trap '' TERM; echo $$ > {d}/{n}; exec sleep 1000\"\n"
        f"d = {str(pid_dir)!r}\n"
        "subprocess.Popen(['bash', '-c', keep.format(d=d, n='child')])\n"
        "subprocess.Popen(['bash', '-c', keep.format(d=d, n='grandchild')], start_new_session=True)\n"
        "open(os.path.join(d, 'main'), 'w').write(str(os.getpid()))\n"
        "time.sleep(1000)\n"
    )


def _started(pid_dir: Path) -> bool:
    return all((pid_dir / n).exists() and (pid_dir / n).read_text() for n in ("main", "child", "grandchild"))


@pytest.mark.parametrize("mode", MODES)
def test_timeout_ends_the_whole_tree(rt: Runtime, tmp_path: Path, mode: str) -> None:
    done, result = run_json(rt, mode, PY, "-c", _tree(tmp_path), options=("--timeout", "2"))
    assert done.returncode == 124, done.stderr
    assert result["state"] == "timeout" and result["signal"] == signal.SIGKILL, result
    wait_until(lambda: all_gone(tree_pids(tmp_path)), 10, "the whole tree to be gone")


@pytest.mark.parametrize("mode", MODES)
def test_cancel_ends_the_whole_tree(rt: Runtime, tmp_path: Path, mode: str) -> None:
    command_id = rt.krex("submit", "--mode", mode, "--", PY, "-c", _tree(tmp_path)).stdout.strip()
    wait_until(lambda: _started(tmp_path), 30, "the command tree to start")
    assert rt.krex("cancel", command_id).returncode == 0
    result = json.loads(rt.krex("wait", "--json", command_id).stdout)
    assert result["state"] == "cancelled", result
    wait_until(lambda: all_gone(tree_pids(tmp_path)), 10, "the whole tree to be gone")


@pytest.mark.parametrize("mode", MODES)
def test_regions_are_granted_to_the_command_itself(rt: Runtime, mode: str) -> None:
    # Inside its region the gate is closed to every tenant but the holder: a
    # command attached to the gate under another tenant id (a forked child
    # under its zygote's) would park on its own kernels.
    done, result = run_json(rt, mode, PY, str(TENANTS / "measured_region.py"), options=("--timeout", "60"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"measured {result['id']}\n")
    started = next(e for e in trace_events(rt, "command_started") if e["id"] == result["id"])
    granted = [e for e in trace_events(rt, "region_granted") if e["command_id"] == result["id"]]
    assert [e["tenant_id"] for e in granted] == [started["tenant_id"]], granted


@pytest.mark.parametrize("mode", MODES)
def test_a_command_with_a_lease(rt: Runtime, mode: str) -> None:
    done, result = run_json(rt, mode, PY, str(TENANTS / "regions.py"), "--regions", "1", options=("--lease",))
    assert done.returncode == 0, done.stderr
    leases = [e for e in trace_events(rt, "region_granted") if e["kind"] == "lease" and e["command_id"] == result["id"]]
    assert len(leases) == 1, leases
