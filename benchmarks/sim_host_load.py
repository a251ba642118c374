"""What host CPU load does to the simulator's kernel timings, with no GPU
contention at all: the canary's measurement (the median of 7 timed 1 ms
kernels), 60 times, on an idle host and with busy-looping processes.

    .venv/bin/python benchmarks/sim_host_load.py [--hogs 6]

A simulated kernel is a sleep timed on the host by a thread of the
simulated driver, so a late wake-up lengthens it; on real GPUs this does
not happen. Prints the p50, p95 and max of the 60 medians, in ms.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from krex_runtime.node import native_build
from krex_runtime.sim.device_file import remove_device

MEASURE = r"""
import statistics
from krex_runtime.sim.simcuda import SimCuda
cuda = SimCuda()
medians = sorted(statistics.median(cuda.time_kernel(1_000_000, repeats=7)) for _ in range(60))
print(f"p50 {medians[30]:.3f}  p95 {medians[57]:.3f}  max {medians[-1]:.3f}")
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hogs", type=int, default=6, help="busy-looping processes for the loaded run")
    args = p.parse_args()
    device = f"host-load-{os.getpid()}"
    env = {**os.environ, "LD_LIBRARY_PATH": str(native_build.simulated_driver_dir()), "KREX_SIM_DEVICE": device}
    try:
        for label, hogs in (("idle host", 0), (f"{args.hogs} busy processes", args.hogs)):
            procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
            try:
                done = subprocess.run([sys.executable, "-c", MEASURE], env=env, capture_output=True, text=True, check=True)
            finally:
                for proc in procs:
                    proc.kill()
                    proc.wait()
            print(f"{label:<20} {done.stdout.strip()}")
    finally:
        remove_device(device)


if __name__ == "__main__":
    main()
