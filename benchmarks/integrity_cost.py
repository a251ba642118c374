#!/usr/bin/env python3
"""Cost of measurement-integrity bookkeeping per kernel launch, on the simulator.

Builds benchmarks/tenants/integrity_launch_loop.c against the simulated
driver and runs it, in alternation, (a) plain, (b) with libkrex.so preloaded
under a gate closed for its own tenant (it holds its region) with
KREX_INTEGRITY=0, and (c) the same with the bookkeeping on (every launch
logged: docs/integrity.md). Each run launches N empty kernels on one stream
between two event records, then asks for the elapsed time (where (c) judges
the window, timed apart). Every run is pinned to one core; all get one
simulated device of their own. Prints the median ns per launch of each,
their ratios to plain, and the bookkeeping's cost per launch: (c) against
(b). Simulator figures: the simulated driver's launch is not a GPU driver's;
the difference is the library's own work. On a GPU the same rows come from
benchmarks/intercept_launch_rate.py.

    python3 benchmarks/integrity_cost.py [--launches N] [--rounds R] [--core C]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from checkout import REPO
from launch_rounds import OFF, alternate, clean_env, column, gates, launch_main, median, under

from krex_runtime.sim.device_file import remove_device

HELD, HELD_INTEGRITY = "libkrex, region held", "libkrex, region held + integrity"


def measure(ns: argparse.Namespace, work: Path) -> int:
    native = REPO / "native"
    subprocess.run(["make", "-s", "-C", str(native), "build/libkrex.so", "build/sim/libcuda.so.1"], check=True)
    exe = work / "integrity_launch_loop"
    cuda_include = os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include")
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", f"-I{native / 'include'}", f"-I{native / 'tests'}", f"-I{cuda_include}",
                    "-o", str(exe), str(REPO / "benchmarks/tenants/integrity_launch_loop.c"),
                    f"-L{native / 'build/sim'}", "-l:libcuda.so.1", f"-Wl,-rpath,{native / 'build/sim'}"], check=True)

    lib = native / "build/libkrex.so"
    device = {"KREX_SIM_DEVICE": f"integrity-bench-{os.getpid()}"}
    try:
        with gates(work) as (_opened, held):
            configs = {
                "plain": dict(clean_env(), **device),
                HELD: under(lib, held, **device, **OFF),
                HELD_INTEGRITY: under(lib, held, **device),
            }
            runs = alternate([str(exe), str(ns.launches)], configs, ns.rounds, ns.core)
    finally:
        remove_device(device["KREX_SIM_DEVICE"])

    plain = median(runs["plain"], 0)
    print(f"SIMULATOR: {ns.launches} empty launches x {ns.rounds} rounds, pinned to core {ns.core}")
    print(f"{'configuration':<34} {'ns/launch median':>17} {'ratio':>7} {'min':>8} {'max':>8} {'query ns':>9}")
    for name, r in runs.items():
        per_launch = column(r, 0)
        print(f"{name:<34} {median(r, 0):>17.1f} {median(r, 0) / plain:>7.4f} {min(per_launch):>8.1f} "
              f"{max(per_launch):>8.1f} {median(r, 1):>9.0f}")
    on, off = runs[HELD_INTEGRITY], runs[HELD]
    paired = statistics.median(a[0] - b[0] for a, b in zip(on, off, strict=True))
    print(f"integrity bookkeeping per launch ({HELD_INTEGRITY!r} - {HELD!r}): "
          f"{median(on, 0) - median(off, 0):+.1f} ns at the medians, {paired:+.1f} ns median of the rounds' "
          f"differences")
    return 0


if __name__ == "__main__":
    sys.exit(launch_main(__doc__, measure, launches=50_000, rounds=21, core=0))
