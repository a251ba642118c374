#!/usr/bin/env python3
"""Launch rate of empty kernels with and without the interception library,
and the cost of its measurement-integrity bookkeeping per launch.

Builds tests/gpu/launch_loop.cu with nvcc (static cudart) and runs it, in
alternation, (a) plain, (b) with libkrex.so preloaded and no gate, (c)
preloaded under an open gate (the full fast path: in_call, gate word, class
counters, context tracking), (d) under a gate closed for its own tenant (it
holds its region) with KREX_INTEGRITY=0, and (e) the same with the
integrity bookkeeping on (every launch logged: docs/integrity.md). Every run
is pinned to the same CPU core, and the configurations alternate within each
round, so drift (clocks, other load) hits all of them alike. Prints the
median and the best launches/s of each configuration and their ratios to
plain, the nanoseconds of the elapsed-time query on the events around the
launches (where (e) judges the window), and the bookkeeping's cost per
launch: (e) against (d).

    python3 benchmarks/intercept_launch_rate.py [--launches N] [--rounds R] [--core C]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from checkout import REPO
from launch_rounds import OFF, alternate, clean_env, column, gates, launch_main, median, under

HELD, HELD_INTEGRITY = "libkrex, region held", "libkrex, region held + integrity"


def measure(ns: argparse.Namespace, work: Path) -> int:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/libkrex.so"], check=True)
    lib = REPO / "native" / "build" / "libkrex.so"
    exe = work / "launch_loop"
    subprocess.run([nvcc, "-O2", "-cudart", "static", "-o", str(exe), str(REPO / "tests/gpu/launch_loop.cu")],
                   check=True)

    with gates(work) as (opened, held):
        configs = {
            "plain": clean_env(),
            "libkrex, no gate": under(lib, None),
            "libkrex, open gate": under(lib, opened),
            HELD: under(lib, held, **OFF),
            HELD_INTEGRITY: under(lib, held),
        }
        runs = alternate([str(exe), str(ns.launches)], configs, ns.rounds, ns.core)

    plain_med, plain_best = median(runs["plain"], 0), max(column(runs["plain"], 0))
    print(f"empty-kernel launch rate, {ns.launches} launches x {ns.rounds} rounds, pinned to core {ns.core}")
    print(f"{'configuration':<34} {'median/s':>10} {'ratio':>7} {'best/s':>10} {'ratio':>7} {'ns/launch':>10} "
          f"{'query ns':>9}")
    for name, r in runs.items():
        med, best = median(r, 0), max(column(r, 0))
        print(f"{name:<34} {med:>10.0f} {med / plain_med:>7.4f} {best:>10.0f} {best / plain_best:>7.4f} "
              f"{1e9 / med:>10.1f} {median(r, 1):>9.0f}")
    on, off = runs[HELD_INTEGRITY], runs[HELD]
    paired = statistics.median(1e9 / a[0] - 1e9 / b[0] for a, b in zip(on, off, strict=True))
    print(f"integrity bookkeeping per launch ({HELD_INTEGRITY!r} - {HELD!r}): "
          f"{1e9 / median(on, 0) - 1e9 / median(off, 0):+.1f} ns at the medians, {paired:+.1f} ns median of the "
          f"rounds' differences; rate ratio {median(on, 0) / median(off, 0):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(launch_main(__doc__, measure, launches=300_000, rounds=15, core=2))
