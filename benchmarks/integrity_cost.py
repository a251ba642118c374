#!/usr/bin/env python3
"""Cost of measurement-integrity bookkeeping per kernel launch, on the simulator.

Builds benchmarks/tenants/integrity_launch_loop.c against the simulated
driver and runs it with libkrex.so preloaded under a gate closed for its own
tenant (the tenant holds its region: every launch is logged), alternating,
round by round, with and without KREX_INTEGRITY=0 (the log off, all else the
same). Each run launches N empty kernels on one stream between two event
records, then asks for the elapsed time (the window's analysis, timed apart).
Every run is pinned to one core; it gets a simulated device of its own.
Prints the median ns per launch of each and their difference: the
bookkeeping's cost per launch. Simulator figures: the simulated driver's
launch is not a GPU driver's, the difference is the library's own work.

    python3 benchmarks/integrity_cost.py [--launches N] [--rounds R] [--core C]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from krex_runtime.regions import gate
from krex_runtime.sim.device_file import remove_device


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--core", type=int, default=0, help="CPU core every run is pinned to")
    ns = ap.parse_args()

    native = REPO / "native"
    subprocess.run(["make", "-s", "-C", str(native), "build/libkrex.so", "build/sim/libcuda.so.1"], check=True)
    work = Path(tempfile.mkdtemp(prefix="krex-integrity-"))
    exe = work / "integrity_launch_loop"
    cuda_include = os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include")
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", f"-I{native / 'include'}", f"-I{native / 'tests'}", f"-I{cuda_include}",
                    "-o", str(exe), str(REPO / "benchmarks/tenants/integrity_launch_loop.c"),
                    f"-L{native / 'build/sim'}", "-l:libcuda.so.1", f"-Wl,-rpath,{native / 'build/sim'}"], check=True)

    g = gate.Gate.create(work / "gate", max_procs=16)
    g.add_tenant(1)
    g.close_gate(1)  # tenant 1 holds its region: its launches are logged
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.05):
            g.stamp_heartbeat()

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    device = f"integrity-bench-{os.getpid()}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}
    held = dict(base, LD_PRELOAD=str(native / "build/libkrex.so"), KREX_GATE_PATH=str(g.path), KREX_TENANT_ID="1",
                KREX_SIM_DEVICE=device)
    configs = {"integrity on": held, "integrity off": dict(held, KREX_INTEGRITY="0")}
    per_launch: dict[str, list[float]] = {k: [] for k in configs}
    analysis: dict[str, list[float]] = {k: [] for k in configs}
    try:
        for _ in range(ns.rounds):
            for name, env in configs.items():
                out = subprocess.run([str(exe), str(ns.launches)], env=env, capture_output=True, text=True, check=True,
                                     preexec_fn=lambda: os.sched_setaffinity(0, {ns.core}))
                launch_ns, query_ns = out.stdout.split()
                per_launch[name].append(float(launch_ns))
                analysis[name].append(float(query_ns))
    finally:
        stop.set()
        beat.join()
        g.open_gate()
        g.detach(remove_tenants=True)
        remove_device(device)

    on, off = statistics.median(per_launch["integrity on"]), statistics.median(per_launch["integrity off"])
    print(f"SIMULATOR: {ns.launches} empty launches x {ns.rounds} rounds, pinned to core {ns.core}, region held")
    print(f"{'configuration':<15} {'ns/launch median':>17} {'min':>8} {'max':>8} {'elapsed-time query ns':>22}")
    for name in configs:
        r = per_launch[name]
        print(f"{name:<15} {statistics.median(r):>17.1f} {min(r):>8.1f} {max(r):>8.1f} "
              f"{statistics.median(analysis[name]):>22.0f}")
    print(f"bookkeeping per launch (median on - median off): {on - off:+.1f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
