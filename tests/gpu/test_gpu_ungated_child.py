"""A tenant's child without the interception library, on a real GPU (issue
47, F5; the simulator's twin is tests/hostile/test_ungated_child.py).

Under `gpu-only` a tenant starts a child with LD_PRELOAD cleared inside
another tenant's region; the child runs matmuls. No gate holds it, and the
certificate once compared only the processes at the release. Now NVML's
running compute processes are read every `regions.hold_sample_s` during the
hold: the child is seen (its context alone takes longer than the interval),
its tenant is frozen for the rest of the hold, and the region is `violated`
by the process witness, naming the child. Skipped without a GPU (marker
`gpu`); written on a machine without one, to be run where there is one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from runtime_helpers import PY, finish, output, snapshot, submit, trace_events
from test_gpu_regions import gpu_runtime

from krex_runtime.testing.local_runtime import wait_until

pytestmark = pytest.mark.gpu

VICTIM = r"""
import json, os, sys, time, torch
from krex_runtime.client import region
from krex_runtime.tenant import region as client
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
a @ a
torch.cuda.synchronize()
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
with region() as r:
    print("granted", flush=True)
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
print(json.dumps({"region": client._channel.region_seq, "verdict": r.verdict}), flush=True)
"""

CHILD = r"""
import time, torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
end = time.time() + 1.0
while time.time() < end:
    a @ a
    torch.cuda.synchronize()
print("child done", flush=True)
"""

ATTACKER = r"""
import os, subprocess, sys, time
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # no interception library
print("waiting", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
child = subprocess.Popen([sys.executable, "-c", sys.argv[2]], env=env)
print("child", child.pid, flush=True)
print("child ended", child.wait(), flush=True)
time.sleep(600)
"""


def test_gpu_an_ungated_child_inside_a_region_is_seen_frozen_and_violates_it(make_runtime, tmp_path: Path) -> None:
    rt = gpu_runtime(make_runtime, protection="gpu-only")
    go, trigger, release = tmp_path / "go", tmp_path / "trigger", tmp_path / "release"
    victim = submit(rt, PY, "-c", VICTIM, str(go), str(release), gpu=0)
    attacker = submit(rt, PY, "-c", ATTACKER, str(trigger), CHILD, gpu=0)
    wait_until(lambda: "ready" in output(rt, victim) and "waiting" in output(rt, attacker), 120, "both tenants")
    go.touch()
    wait_until(lambda: "granted" in output(rt, victim), 120, "the victim's region")
    trigger.touch()
    wait_until(lambda: "child " in output(rt, attacker), 60, "the ungated child")
    child = int(next(line.split()[1] for line in output(rt, attacker).splitlines() if line.startswith("child ")))
    time.sleep(5.0)  # its second of matmuls would be over, had it not been frozen
    assert "child done" not in output(rt, attacker)
    release.touch()
    wait_until(lambda: "verdict" in output(rt, victim), 120, "the victim's verdict")
    result = json.loads(next(line for line in output(rt, victim).splitlines() if line.startswith("{")))
    released = next(e for e in trace_events(rt, "region_released") if e["region"] == result["region"])
    assert result["verdict"] == "violated", released["verdict_reasons"]
    assert any(r.startswith("processes:") and f"pid {child})" in r for r in released["verdict_reasons"]), \
        released["verdict_reasons"]
    tenant = next(c["tenant_id"] for c in snapshot(rt)["commands"] if c["id"] == attacker)
    assert released["late_frozen"] == [tenant]
    wait_until(lambda: "child ended 0" in output(rt, attacker), 120, "the child, thawed, to end")
    finish(rt, attacker)
