"""A tenant that asks for regions back to back once told to: for the
fair-share tests. argv: GO_FILE REGIONS. Prints "ready" once it can time
(its CUDA context made), waits for GO_FILE, then holds REGIONS regions of
about 30 ms, each timing a simulated kernel."""

import os
import sys
import time

from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda

go, regions = sys.argv[1], int(sys.argv[2])
cuda = SimCuda()
cuda.time_kernel(100_000, repeats=1)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
for _ in range(regions):
    with region():
        cuda.time_kernel(200_000, repeats=1)
        time.sleep(0.03)
