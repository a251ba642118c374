"""The headline figures on simulated GPUs whose tenants contend: utilisation
(the device's busy time), memory (the tenants' allocations), the SM clock of
a GPU that heats under the load (gpus.simulated_heat), and the inflation
estimate the runtime's own code takes from the clocks its regions start and
end at. The simulator models the cause; nothing here feeds a figure in.

Presence and sign only, never magnitudes or times: the machine is shared."""

from __future__ import annotations

import socket
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from runtime_helpers import REPO, busy, finish, submit, wait_ready

from krex_runtime.node.config import load_config
from krex_runtime.sim import layout as sim_layout
from krex_runtime.testing.local_runtime import Runtime, wait_until

PY = sys.executable
GIB = 1 << 30
# A demo candidate: its inputs on the GPU, a correctness check, then its
# kernel timed in a region (krex_runtime/demo/candidate.py).
CANDIDATE = [PY, "-m", "krex_runtime.demo.candidate", "--import-s", "0.1", "--compile-s", "0.05",
             "--kernel-us", "2000", "--check-kernels", "20", "--repeats", "20", "--mem-gb", "0.5"]
# A tenant that holds 2 GiB of GPU memory until it is cancelled.
HOLDER = ("import time\nfrom krex_runtime.sim.simcuda import SimCuda\nSimCuda().alloc(2 << 30)\n"
          "print('ready', flush=True)\ntime.sleep(600)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metrics(port: int) -> dict[str, float]:
    """GPU 0's gauges from /metrics, by name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.labels.get("gpu") == "0"}


def _gpu0(rt: Runtime, verb: str) -> dict:
    with rt.client() as c:
        body = c.call(verb)
    gpus = body["state"]["gpus"] if verb == "snapshot" else body["gpus"]
    return next(g for g in gpus if g["index"] == 0)


def test_contending_tenants_show_in_utilisation_memory_clock_and_the_inflation_estimate(make_runtime) -> None:
    port = _free_port()
    rt = make_runtime(policy="krex", sim=1, slots=8, gpus_extra="simulated_heat = true",
                      extra_config=f'prometheus_listen = "127.0.0.1:{port}"\n')
    others = [busy(rt, gpu=0, kernel_us=2000, depth=4) for _ in range(3)]
    wait_ready(rt, *others)
    holder = submit(rt, PY, "-c", HOLDER)
    wait_ready(rt, holder)

    def contended() -> dict | None:
        t = _gpu0(rt, "snapshot")["telemetry"]
        return t if t.get("util_pct") and t.get("mem_used") and t["sm_clock_mhz"] < sim_layout.TOP_SM_CLOCK_MHZ else None

    telemetry = wait_until(contended, 120, "the GPU busy, holding memory and below its top clock", interval_s=0.5)
    assert 0 < telemetry["util_pct"] <= 100 and telemetry["mem_used"] >= 2 * GIB
    assert telemetry["temp_c"] > sim_layout.AMBIENT_C and telemetry["simulated"] is True

    # Regions granted on the warm GPU: each records the clock at its grant and
    # release, and the runtime's estimate reads what that clock cost them.
    def estimated() -> dict | None:
        done = rt.krex("run", "--", *CANDIDATE)
        assert done.returncode == 0, done.stderr
        estimate = _gpu0(rt, "status")["estimate"]
        return estimate if (estimate.get("inside_p50") or 0) > 0 else None

    estimate = wait_until(estimated, 300, "a non-zero inflation estimate", interval_s=0)
    assert estimate["regions"] >= 1 and estimate["inside_p95"] >= estimate["inside_p50"] > 0

    gauges = _metrics(port)
    assert gauges["krex_gpu_utilization_ratio"] > 0 and gauges["krex_gpu_memory_used_bytes"] > 0
    assert 0 < gauges["krex_gpu_sm_clock_hertz"] < sim_layout.TOP_SM_CLOCK_MHZ * 1e6
    assert gauges["krex_region_clock_cost_ratio"] > 0
    finish(rt, holder, *others)


def test_the_demo_runs_its_gpus_warm_with_a_canary() -> None:
    """configs/simulated.toml, the demo's: GPUs that heat (their clock, and so
    the estimate, move with the load) and a canary per GPU (the console's
    `canary outside` figures)."""
    config = load_config(str(REPO / "configs" / "simulated.toml"))
    assert config.gpus.simulated_heat is True
    assert config.telemetry.canary is True
