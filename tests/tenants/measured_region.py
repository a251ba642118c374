"""One region around two simulated kernels, then `measured COMMAND_ID`: the
command the region was granted to, as the tenant itself knows it."""

import os

from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda

cuda = SimCuda()
with region():
    cuda.time_kernel(100000, repeats=2)
print("measured", os.environ["KREX_COMMAND_ID"])
