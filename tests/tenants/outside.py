"""A tenant that works outside regions: `--rounds` times it launches a short
simulated kernel and synchronises, like a benchmark's correctness check.

Prints "started <ns>" after its first round and "done <ns>" after its last
(CLOCK_MONOTONIC, as the runtime's trace stamps); exits 0.
"""

import argparse
import time

from krex_runtime.sim.simhip import sim_gpu

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=20)
p.add_argument("--kernel-us", type=float, default=100)
args = p.parse_args()

cuda = sim_gpu()
for n in range(args.rounds):
    cuda.launch(int(args.kernel_us * 1000))
    cuda.synchronize()
    if n == 0:
        print("started", time.monotonic_ns(), flush=True)
print("done", time.monotonic_ns(), flush=True)
