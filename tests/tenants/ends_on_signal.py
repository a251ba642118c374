"""A tenant that uses its simulated GPU once, prints "ready", and ends (exit
status 0) as soon as the file argv[1] appears: a command finishing while
another tenant holds the region."""

import os
import sys
import time

from krex_runtime.sim.simhip import sim_gpu

sim_gpu().time_kernel(1000, repeats=1)
print("ready", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.01)
