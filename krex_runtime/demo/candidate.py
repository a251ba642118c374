"""A synthetic kernel-agent candidate on the simulated GPU, for the demo.

It spends its time the way a real benchmark command does: start-up (a stand-in
for `import torch`), compilation (CPU work), a correctness check (a few
kernels), then a timing loop inside a region. Prints one JSON result line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--import-s", type=float, default=1.0)
    p.add_argument("--compile-s", type=float, default=0.2)
    p.add_argument("--kernel-us", type=float, default=1000.0)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    t0 = time.monotonic()
    time.sleep(args.import_s)
    deadline = time.monotonic() + args.compile_s
    x = 0
    while time.monotonic() < deadline:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    cuda = SimCuda()
    kernel_ns = int(args.kernel_us * 1000)
    for _ in range(3):
        cuda.launch(kernel_ns)
    cuda.synchronize()
    with region():
        times = cuda.time_kernel(kernel_ns, repeats=args.repeats)
    print(
        json.dumps(
            {
                "kernel_us": args.kernel_us,
                "median_ms": statistics.median(times),
                "inflation": statistics.median(times) / (args.kernel_us / 1000) - 1,
                "wall_s": time.monotonic() - t0,
            }
        )
    )


if __name__ == "__main__":
    main()
