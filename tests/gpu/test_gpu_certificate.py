"""The exclusivity certificate on a real GPU (regions/certificate.py): with
only the runtime's tenants on the GPU every region is verified; a process the
runtime did not start, running kernels on the same GPU, makes the regions
held meanwhile violated by the process witness (NVML's running compute
processes). Skipped without a GPU (marker `gpu`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from runtime_helpers import trace_events
from test_gpu_regions import gpu_runtime, torch_busy, torch_regions

pytestmark = pytest.mark.gpu

FOREIGN = r"""
import sys, time, torch
a = torch.randn(4096, 4096, device="cuda")
a @ a
torch.cuda.synchronize()
print("busy", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    a @ a
    torch.cuda.synchronize()
"""


def released(rt, command_id: str) -> list[dict]:
    tenant = next(e["tenant_id"] for e in trace_events(rt, "command_started") if e["id"] == command_id)
    return [e for e in trace_events(rt, "region_released") if e.get("kind") == "region" and e["tenant_id"] == tenant]


def test_gpu_regions_are_verified_among_tenants_and_violated_by_a_foreign_process(make_runtime) -> None:
    rt = gpu_runtime(make_runtime)
    busy = torch_busy(rt)  # another tenant, gated: it must not spoil the verdict
    clean = torch_regions(rt, "--regions", "3", "--n", "2048", "--repeats", "3")
    assert rt.krex("wait", clean, timeout=300).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}
    foreign = subprocess.Popen([sys.executable, "-c", FOREIGN, "300"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert foreign.stdout is not None and foreign.stdout.readline().strip() == "busy"
        dirty = torch_regions(rt, "--regions", "3", "--n", "2048", "--repeats", "3")
        assert rt.krex("wait", dirty, timeout=300).returncode == 0
    finally:
        foreign.kill()
        foreign.wait()
    rt.krex("cancel", busy)
    rt.stop()
    ok = released(rt, clean)
    assert len(ok) == 3 and {e["verdict"] for e in ok} == {"verified"}, [e["verdict_reasons"] for e in ok]
    bad = released(rt, dirty)
    assert len(bad) == 3 and {e["verdict"] for e in bad} == {"violated"}, [e["verdict_reasons"] for e in bad]
    for e in bad:
        assert e["verdict_reasons"][0].startswith(f"processes: pid {foreign.pid} uses the GPU"), e["verdict_reasons"]
