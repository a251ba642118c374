"""A harness that times many windows and reads them all at the end, as
triton's do_bench does: inside one region, for each of N windows, a launch
before the window (do_bench's cache clear), the start record, L simulated
kernels on the default stream, the end record; then one synchronisation and
every elapsed time. Honest throughout. Prints one JSON line: the region's
integrity record as region() saw it.

    many_windows.py N L
"""

import json
import sys

from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda

windows, launches = int(sys.argv[1]), int(sys.argv[2])
cuda = SimCuda()
starts = [cuda.event() for _ in range(windows)]
ends = [cuda.event() for _ in range(windows)]
with region() as r:
    for start, end in zip(starts, ends, strict=True):
        cuda.launch(1_000, name="clear_cache")
        cuda.record(start)
        for _ in range(launches):
            cuda.launch(1_000, name="timed")
        cuda.record(end)
    cuda.synchronize()
    times = [cuda.elapsed_ms(start, end) for start, end in zip(starts, ends, strict=True)]
print(json.dumps(r.integrity))
