"""A command ends when its main process ends, in every mode: what it left
running (a background child holding its stdout) gets
`dispatcher.orphan_grace_s` (0.5 s in tests) and is then killed. A region
belongs to the process that asked for it: when that process dies, the region
is released at once, even while a child it forked keeps the channel's socket."""

from __future__ import annotations

import json
from typing import Any

import psutil
import pytest
from runtime_helpers import (
    PY,
    TENANTS,
    busy,
    cgroup_root,
    command_pid,
    frozen_cgroups,
    gpu_state,
    krex_runtime,
    output,
    pool_and_zygote_ready,
    submit,
    trace_events,
    wait_ready,
)

from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until

CHILD_S = 60  # how long the left child would keep the command running
LEAVES_A_CHILD = (
    "import subprocess, sys\n"
    f"child = subprocess.Popen(['sleep', '{CHILD_S}'])\n"
    "print('main-exits', child.pid, flush=True)\n"
)


@pytest.fixture
def modes_runtime(make_runtime: Any) -> Runtime:
    rt = make_runtime(sim=1, extra_config="\n[pool]\nsize_per_gpu = 1\nzygote = true\n")
    wait_until(lambda: pool_and_zygote_ready(rt, 1), 120, "the pool and the zygote")
    return rt


def test_a_command_ends_with_its_main_process_in_every_mode(modes_runtime: Runtime) -> None:
    rt = modes_runtime
    done = rt.krex("run", "--json", "--", "bash", "-c", f"sleep {CHILD_S} & echo main-exits $!")
    results = {"process (bash)": (done, done.stdout)}
    for mode in ("process", "forked", "pooled"):
        done = rt.krex("run", "--json", "--mode", mode, "--", PY, "-c", LEAVES_A_CHILD)
        results[mode] = (done, done.stdout)
    for mode, (done, _) in results.items():
        assert done.returncode == 0, f"{mode}: {done.stderr}"
        result = json.loads(done.stdout)
        assert result["state"] == "finished" and result["exit_code"] == 0, f"{mode}: {result}"
        assert result["run_s"] < CHILD_S / 2, f"{mode}: ran {result['run_s']:.1f} s, as long as its child"
        said = result["stdout"].split()
        assert said[0] == "main-exits", f"{mode}: {result['stdout']!r}"
        wait_until(lambda said=said: not hygiene.alive(int(said[1])), 30, f"{mode}: the left child to be killed")
    wait_until(lambda: pool_and_zygote_ready(rt, 1), 120, "the pool back to idle")


def test_a_region_is_released_when_its_requester_dies_though_its_child_keeps_the_socket(make_runtime: Any) -> None:
    rt = krex_runtime(make_runtime)  # hold limit 60 s: the release must come from the requester's death
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    holder = submit(rt, "bash", "-c", f"{PY} {TENANTS / 'fork_holder.py'}; sleep 1000")
    wait_until(lambda: "child" in output(rt, holder), 60, "the requester to fork and exit")
    said = dict(line.split() for line in output(rt, holder).splitlines())
    requester, child = int(said["entered"]), int(said["child"])
    released = wait_until(lambda: trace_events(rt, "region_released"), 30, "the region to be released")
    assert released[-1]["reason"] == f"its requester (pid {requester}) died", released[-1]
    assert hygiene.alive(child), "the child that holds the socket is still alive: the release is the requester's"
    assert psutil.Process(child).net_connections("unix"), "the child still holds the channel's socket"
    assert gpu_state(rt)["region_holder"] is None
    root = cgroup_root(rt)
    wait_until(lambda: frozen_cgroups(root) == [] and not hygiene.held_back(rt.run_dir), 30, "the others thawed")
    assert command_pid(rt, holder) is not None  # the command itself still runs
    for command_id in (holder, *others):
        rt.krex("cancel", command_id)
    wait_until(lambda: not hygiene.alive(child), 30, "the child to end with its command")
