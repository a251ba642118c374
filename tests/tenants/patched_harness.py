"""A candidate that replaces its timing harness after import (under
auto-regions): it times once with the real `triton.testing.do_bench` (the
stand-in of tests/tenants/harness), then swaps in a fake that answers without
timing anything, calls it, and times once more with `cupyx.profiler.benchmark`
inside its own region(). Prints one JSON line: the integrity records of its
own region and of the honest call's region as region() saw them."""

import json

import triton.testing
from cupyx.profiler import benchmark

from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda

cuda = SimCuda()


def kernel():
    cuda.launch(100_000, name="timed")


with region() as honest:
    triton.testing.do_bench(kernel)  # wrapped: nested in this region
triton.testing.do_bench = lambda fn, **kwargs: 0.001  # the patch: a fast answer, nothing timed
triton.testing.do_bench(kernel)
with region() as after:
    benchmark(kernel)
print(json.dumps({"honest": honest.integrity, "after": after.integrity}))
