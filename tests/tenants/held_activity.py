"""A region holder whose test decides what happens around it during each hold.

argv: CONTROL_DIR MODE... One region per MODE, in order. Before region i it
waits for CONTROL_DIR/go<i> (`{"ready": true}` once it is a CUDA user
and waits for the first); once granted it prints {"granted": i, "tid": ...}
and holds until CONTROL_DIR/release<i> appears, meanwhile either busy
(`spin`: always runnable, as a launching thread is), asleep (`sleep`) or
running 20 ms kernels one after another (`launch`, as a measuring holder). After
each region one JSON line: its region number, verdict and reasons.
"""

import json
import sys
import threading
import time
from pathlib import Path

from krex_runtime.client import region
from krex_runtime.sim.simhip import sim_gpu
from krex_runtime.tenant import region as client

control = Path(sys.argv[1])
cuda = sim_gpu()
cuda.time_kernel(1000, repeats=1)  # a CUDA user before its first region, as a candidate is
print(json.dumps({"ready": True}), flush=True)
for i, mode in enumerate(sys.argv[2:]):
    deadline = time.monotonic() + 120
    while not (control / f"go{i}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    with region() as r:
        print(json.dumps({"granted": i, "tid": threading.get_native_id()}), flush=True)
        release = control / f"release{i}"
        while not release.exists() and time.monotonic() < deadline:
            if mode == "sleep":
                time.sleep(0.01)
            elif mode == "launch":
                cuda.time_kernel(20_000, repeats=1)
        cuda.time_kernel(1000, repeats=1)
    print(json.dumps({"region": client._channel.region_seq, "verdict": r.verdict, "reasons": r.verdict_reasons}),
          flush=True)
