"""A tenant that measures a simulated kernel inside regions, like a benchmark's timing loop.

argv: regions kernel_us repeats [pause_ms]. Prints one JSON line per region:
{"region": n, "times_ms": [...]}; exits 0.
"""

import json
import random
import sys
import time

from krex_runtime.client import region
from krex_runtime.simcuda import SimCuda

regions, kernel_us, repeats = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
pause_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
cuda = SimCuda()
cuda.time_kernel(int(kernel_us * 1000), repeats=1)  # warm: first launch sets up the stream
rng = random.Random()
for n in range(regions):
    if pause_ms:
        time.sleep(rng.uniform(0, pause_ms) / 1000)
    with region():
        times = cuda.time_kernel(int(kernel_us * 1000), repeats=repeats)
    print(json.dumps({"region": n, "times_ms": times}), flush=True)
