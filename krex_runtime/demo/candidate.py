"""A synthetic kernel-agent candidate on the simulated GPU, for the demo.

It spends its time the way a real benchmark command does: start-up (a stand-in
for `import torch`), allocating its inputs and outputs on the GPU, compilation
(CPU work), a correctness check (kernels, outside any region: they share the
GPU with the other tenants), then a timing loop inside a region. Prints one
JSON result line. What it allocates and runs is what the console's memory,
utilisation and, on a GPU that heats (gpus.simulated_heat), clock and
inflation figures show.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda

GIB = 1 << 30


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--import-s", type=float, default=1.0)
    p.add_argument("--compile-s", type=float, default=0.2)
    p.add_argument("--kernel-us", type=float, default=1000.0)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--mem-gb", type=float, default=0.0, help="GPU memory its inputs and outputs take, GiB")
    p.add_argument("--check-kernels", type=int, default=3, help="kernels of the correctness check")
    args = p.parse_args()
    t0 = time.monotonic()
    time.sleep(args.import_s)
    cuda = SimCuda()
    # Allocated, never touched: the simulator's device memory is the host's, and
    # untouched pages cost the host nothing while counting on the device.
    buffers = [cuda.alloc(int(args.mem_gb * GIB))] if args.mem_gb > 0 else []
    deadline = time.monotonic() + args.compile_s
    x = 0
    while time.monotonic() < deadline:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    kernel_ns = int(args.kernel_us * 1000)
    for _ in range(args.check_kernels):
        cuda.launch(kernel_ns)
    cuda.synchronize()
    with region():
        times = cuda.time_kernel(kernel_ns, repeats=args.repeats)
    for buffer in buffers:
        cuda.free(buffer)
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
