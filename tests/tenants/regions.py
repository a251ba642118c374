"""A tenant that measures a simulated kernel inside regions, like a benchmark's timing loop.

Prints one JSON line per region: {"region": n, "times_ms": [...]}; exits 0.
Between regions it can leave `--noise` kernels queued (so a region's entry has
other work of the node to drain), and it can hold each region `--hold-s` longer.
"""

import json
import random
import time

from region_arguments import region_arguments

from krex_runtime.client import RegionError, region
from krex_runtime.sim.simhip import sim_gpu

p = region_arguments(repeats=5, noise="kernels left queued before each region")
p.add_argument("--kernel-us", type=float, default=1000)
p.add_argument("--noise-us", type=float, default=500)
args = p.parse_args()

cuda = sim_gpu()
noise_stream = cuda.stream()
cuda.time_kernel(int(args.kernel_us * 1000), repeats=1)  # warm: the first launch sets up the stream
rng = random.Random()
for n in range(args.regions):
    if args.pause_ms:
        time.sleep(rng.uniform(0, args.pause_ms) / 1000)
    for _ in range(args.noise):
        cuda.launch(int(args.noise_us * 1000), stream=noise_stream)
    try:
        with region():
            times = cuda.time_kernel(int(args.kernel_us * 1000), repeats=args.repeats)
            time.sleep(args.hold_s)
    except RegionError as exc:
        print(json.dumps({"region": n, "error": exc.code, "reason": exc.reason}), flush=True)
        continue
    print(json.dumps({"region": n, "times_ms": times}), flush=True)
cuda.synchronize()
