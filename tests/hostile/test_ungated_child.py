"""A tenant's child without the interception library cannot run GPU work
inside another tenant's region unseen (issue 47, F5).

The attack: a tenant starts a child with LD_PRELOAD cleared, so no gate
holds it; the child runs a kernel inside another tenant's region and ends
before the release. The certificate compared only the processes present at
the release, so the region was certified `verified`. It ran because nothing
froze it: under `gpu-only` no tenant is frozen, and under `gpu+cpu` a
tenant placed on another GPU (its child using this one) is not one of this
GPU's tenants to freeze.

Now the certificate sees every process that used the GPU during the hold
(regions/entry/hold_processes.py): the region is `violated`, naming the child
and that it ended before the release; its tenant is frozen once the child
is seen, for the rest of the hold; and a tenant with such a process on the
GPU when a region enters is frozen by the entry, whatever the protection.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, HeldRegions, finish, krex_runtime, output, snapshot, submit, trace_events

from krex_runtime.sim.device_file import read_device
from krex_runtime.testing.local_runtime import wait_until

# The child: the simulated driver alone, no interception library; a kernel
# (or, with a count of 0, kernels with pauses until killed), then it ends.
CHILD = r"""
import sys, time
from krex_runtime.sim.simcuda import SimCuda
cuda = SimCuda()
kernels = int(sys.argv[1])
n = 0
while kernels == 0 or n < kernels:
    cuda.launch(int(float(sys.argv[2]) * 1e6))
    cuda.synchronize()
    n += 1
    print("kernel", n, flush=True)
    time.sleep(float(sys.argv[3]))
"""

ATTACKER = r"""
import os, subprocess, sys, time
trigger, visible, kernels, kernel_ms, pause_s = sys.argv[1:6]
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # no interception library
if visible:
    env["CUDA_VISIBLE_DEVICES"] = visible  # a GPU it was not placed on
print("waiting", flush=True)
while trigger and not os.path.exists(trigger):
    time.sleep(0.01)
child = subprocess.Popen([sys.executable, "-c", sys.argv[6], kernels, kernel_ms, pause_s], env=env)
print("child", child.pid, flush=True)
print("child ended", child.wait(), flush=True)
time.sleep(600)
"""


def _lines(rt: Any, command_id: str) -> list[str]:
    return output(rt, command_id).splitlines()


def _child_pid(rt: Any, attacker: str) -> int:
    wait_until(lambda: any(line.startswith("child ") for line in _lines(rt, attacker)), 60, "the ungated child")
    return int(next(line.split()[1] for line in _lines(rt, attacker) if line.startswith("child ")))


def _tenant(rt: Any, command_id: str) -> int:
    return next(c["tenant_id"] for c in snapshot(rt)["commands"] if c["id"] == command_id)


def _released(rt: Any, region: int) -> dict[str, Any]:
    return next(e for e in trace_events(rt, "region_released") if e["region"] == region and e["gpu"] == 0)


def _attack(rt: Any, tmp_path: Path, *, other_gpu: bool = False, child: str = CHILD) -> tuple[HeldRegions, str]:
    """The victim holds a region on GPU 0, running kernels, until told; the
    attacker's ungated child starts inside it and runs a 300 ms kernel.
    Returns the victim and the attacker."""
    trigger = tmp_path / "trigger"
    victim = HeldRegions(rt, tmp_path / "victim", "launch", gpu=0)
    attacker = submit(rt, PY, "-c", ATTACKER, str(trigger), "0" if other_gpu else "", "1", "300", "0", child,
                      gpu=1 if other_gpu else 0)
    wait_until(lambda: "waiting" in _lines(rt, attacker), 60, "the attacker")
    victim.go(0)
    victim.granted(0)
    trigger.touch()
    return victim, attacker


def _blamed(rt: Any, region: int, pid: int) -> str:
    reasons = _released(rt, region)["verdict_reasons"]  # whole (the channel's line cuts long ones)
    found = [r for r in reasons if r.startswith("processes:") and f"pid {pid})" in r]
    assert found, reasons
    return found[0]


@pytest.mark.parametrize("placement", ["same GPU, gpu-only", "another GPU, gpu+cpu"])
def test_an_ungated_child_that_ran_and_ended_inside_a_region_violates_it(
        make_runtime: Any, tmp_path: Path, placement: str) -> None:
    """Read at the grant and the release only (hold_sample_s = 0): the child
    that ended before the release is still seen, by the slot it left."""
    other_gpu = placement.startswith("another")
    rt = krex_runtime(make_runtime, sim=2 if other_gpu else 1, protection="gpu+cpu" if other_gpu else "gpu-only",
                      hold_sample_s=0.0)
    victim, attacker = _attack(rt, tmp_path, other_gpu=other_gpu)
    child = _child_pid(rt, attacker)
    wait_until(lambda: any(line.startswith("child ended 0") for line in _lines(rt, attacker)), 60, "the child's end")
    result = victim.release(0)
    assert result["verdict"] == "violated", result
    assert "ran 1 item(s) the gate did not hold, and ended before the release" in _blamed(rt, result["region"], child)
    finish(rt, attacker)


KILLED_CHILD = r"""
import os, signal, sys, time
from krex_runtime.sim.simcuda import SimCuda
cuda = SimCuda()
cuda.launch(int(float(sys.argv[2]) * 1e6))  # queued: it runs while this process dies
time.sleep(0.05)
print("dying", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_ungated_child_killed_inside_its_kernel_is_seen_after_its_slot_is_reaped(
        make_runtime: Any, tmp_path: Path) -> None:
    """A process that dies with work in flight has its simulated slot reaped
    within milliseconds by whoever runs next (the victim's kernels): the
    driver keeps a record of the slot (sim/device_file.py), which the
    certificate reads."""
    rt = krex_runtime(make_runtime, sim=1, protection="gpu-only", hold_sample_s=0.0)
    victim, attacker = _attack(rt, tmp_path, child=KILLED_CHILD)
    child = _child_pid(rt, attacker)
    wait_until(lambda: any(line.startswith("child ended -9") for line in _lines(rt, attacker)), 60, "the child's end")
    time.sleep(0.3)  # the victim's next kernels reap its slot
    assert child in [r.pid for r in read_device(rt.device).reaped]  # its slot is gone: the driver's record is left
    result = victim.release(0)
    assert result["verdict"] == "violated", result
    assert "ran 1 item(s) the gate did not hold, and ended before the release" in _blamed(rt, result["region"], child)
    finish(rt, attacker)


def test_an_ungated_child_seen_during_a_region_is_frozen_with_its_tenant(make_runtime: Any, tmp_path: Path) -> None:
    """Sampled during the hold (the default): the child is seen once its
    first kernel starts, and its tenant is frozen for the rest of the hold;
    the region is violated by that kernel; the child goes on after it."""
    rt = krex_runtime(make_runtime, sim=1, protection="gpu-only")
    victim, attacker = _attack(rt, tmp_path)
    child = _child_pid(rt, attacker)
    time.sleep(2.0)  # it would have run its kernel and ended by now, had it not been frozen
    assert not any(line.startswith("child ended") for line in _lines(rt, attacker)), _lines(rt, attacker)
    result = victim.release(0)
    assert result["verdict"] == "violated", result
    assert "ran 1 item(s) the gate did not hold" in _blamed(rt, result["region"], child)
    assert _released(rt, result["region"])["late_frozen"] == [_tenant(rt, attacker)]
    wait_until(lambda: any(line.startswith("child ended 0") for line in _lines(rt, attacker)), 60,
               "the child to go on, thawed, and end")
    finish(rt, attacker)


@pytest.mark.parametrize("protection", ["gpu-only", "gpu+cpu"])
def test_a_tenant_with_an_ungated_process_on_the_gpu_is_frozen_by_the_entry(
        make_runtime: Any, tmp_path: Path, protection: str) -> None:
    """The child already runs kernels (with pauses) when the region enters;
    its tenant is frozen for the hold, under gpu-only (where no tenant was
    frozen) as under gpu+cpu (its cgroup holds the child too), so at most a
    kernel it had started runs on."""
    rt = krex_runtime(make_runtime, sim=1, protection=protection)
    victim = HeldRegions(rt, tmp_path / "victim", "launch", gpu=0)
    attacker = submit(rt, PY, "-c", ATTACKER, "", "", "0", "2", "0.03", CHILD, gpu=0)
    child = _child_pid(rt, attacker)
    wait_until(lambda: "kernel 3" in output(rt, attacker), 60, "the child's kernels")
    victim.go(0)
    victim.granted(0)
    time.sleep(1.0)  # the child's pauses are 30 ms: it would have run kernels here
    result = victim.release(0)
    granted = next(e for e in trace_events(rt, "region_granted") if e["region"] == result["region"])
    assert granted["frozen"] == [_tenant(rt, attacker)], granted
    released = _released(rt, result["region"])
    blamed = [r for r in released["verdict_reasons"] if f"pid {child})" in r]
    # Frozen between two of its kernels, or inside one it had started before the grant.
    assert result["verdict"] == "verified" or (result["verdict"] == "violated" and blamed and any(
        f"ran {n} item(s)" in blamed[0] for n in (0, 1))), (result, released["verdict_reasons"])
    count = output(rt, attacker).count("kernel ")
    wait_until(lambda: output(rt, attacker).count("kernel ") > count + 2, 30, "the child to go on after the region")
    finish(rt, attacker, victim.id)
