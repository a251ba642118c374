"""A tenant whose regions read their exclusivity certificate.

argv: GO_FILE [REGIONS]. Holds REGIONS regions (default 2) of 1 s each, each
timing a simulated kernel; before every region but the first it prints
"waiting" and waits for GO_FILE to appear (then removes it), so a test can
start interference in between. One JSON line per region: its verdict and
reasons, and the runtime's region number.
"""

import json
import os
import sys
import time

from krex_runtime.client import region
from krex_runtime.sim.simhip import sim_gpu
from krex_runtime.tenant import region as client

go = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 2
cuda = sim_gpu()
for n in range(count):
    if n:
        print("waiting", flush=True)
        while not os.path.exists(go):
            time.sleep(0.02)
        os.unlink(go)
    with region() as r:
        cuda.time_kernel(200_000, repeats=3)
        time.sleep(1.0)
    print(json.dumps({"region": client._channel.region_seq, "verdict": r.verdict, "reasons": r.verdict_reasons}),
          flush=True)
