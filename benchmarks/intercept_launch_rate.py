#!/usr/bin/env python3
"""Launch rate of empty kernels with and without the interception library.

Builds tests/gpu/launch_loop.cu with nvcc (static cudart) and runs it, in
alternation, (a) plain, (b) with libkrex.so preloaded and no gate, and (c)
preloaded under an open gate (the full fast path: in_call, gate word, class
counters, context tracking). Every run is pinned to the same CPU core, and
the configurations alternate within each round, so drift (clocks, other load)
hits all of them alike. Prints the median and the best launches/s of each
configuration and their ratios to plain.

    python3 benchmarks/intercept_launch_rate.py [--launches N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from krex_runtime.regions import gate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--core", type=int, default=2, help="CPU core every run is pinned to")
    ns = ap.parse_args()

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/libkrex.so"], check=True)
    lib = REPO / "native" / "build" / "libkrex.so"
    work = Path(tempfile.mkdtemp(prefix="krex-bench-"))
    exe = work / "launch_loop"
    subprocess.run([nvcc, "-O2", "-cudart", "static", "-o", str(exe), str(REPO / "tests/gpu/launch_loop.cu")],
                   check=True)

    g = gate.Gate.create(work / "gate", max_procs=16)
    g.add_tenant(1)  # the entries of the tenant below (KREX_TENANT_ID=1)
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.05):
            g.stamp_heartbeat()

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    base = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}
    configs = {
        "plain": base,
        "libkrex, no gate": dict(base, LD_PRELOAD=str(lib)),
        "libkrex, open gate": dict(base, LD_PRELOAD=str(lib), KREX_GATE_PATH=str(g.path), KREX_TENANT_ID="1"),
    }
    rates: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(ns.rounds):
        for name, env in configs.items():
            out = subprocess.run([str(exe), str(ns.launches)], env=env, capture_output=True, text=True, check=True,
                                 preexec_fn=lambda: os.sched_setaffinity(0, {ns.core}))
            rates[name].append(float(out.stdout.split()[-1]))
    stop.set()
    beat.join()
    g.detach(remove_tenants=True)

    plain_med, plain_best = statistics.median(rates["plain"]), max(rates["plain"])
    print(f"empty-kernel launch rate, {ns.launches} launches x {ns.rounds} rounds, pinned to core {ns.core}")
    print(f"{'configuration':<20} {'median/s':>10} {'ratio':>7} {'best/s':>10} {'ratio':>7} {'ns/launch':>10}")
    for name, r in rates.items():
        med, best = statistics.median(r), max(r)
        print(f"{name:<20} {med:>10.0f} {med / plain_med:>7.4f} {best:>10.0f} {best / plain_best:>7.4f} "
              f"{1e9 / med:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
