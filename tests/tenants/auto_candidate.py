"""An unmodified candidate: it times a simulated kernel with the stand-in
harnesses (tests/tenants/harness, put on PYTHONPATH) and never asks for a
region itself. Every kernel it times is named `timed`; one it runs before,
untimed, `untimed`.

argv: the harnesses to use, of: do_bench cudagraph timeit blocked adaptive
cupyx suite runner nested none. Prints one JSON line: what it measured, which
of the harnesses' and KREX's modules were imported, and whether the user's
sitecustomize ran.
"""

import json
import os
import sys

from krex_runtime.sim.simcuda import SimCuda

cuda = SimCuda()


def kernel():
    cuda.launch(200_000, name="timed")


cuda.launch(100_000, name="untimed")
cuda.synchronize()
measured = {}
for what in sys.argv[1:]:
    if what == "do_bench":
        from triton.testing import do_bench

        measured[what] = do_bench(kernel)
    elif what == "cudagraph":
        import triton.testing

        measured[what] = triton.testing.do_bench_cudagraph(kernel)
    elif what in ("timeit", "blocked", "adaptive"):
        from torch.utils.benchmark import Timer

        timer = Timer(stmt="kernel()", globals={"kernel": kernel})
        method = {"timeit": timer.timeit, "blocked": timer.blocked_autorange, "adaptive": timer.adaptive_autorange}
        measured[what] = method[what]().mean
    elif what == "cupyx":
        from cupyx.profiler import benchmark

        measured[what] = benchmark(kernel)
    elif what == "suite":
        import suite_helper

        measured[what] = suite_helper.measure(kernel)
    elif what == "runner":
        import suite_helper

        measured[what] = suite_helper.Runner().run(kernel)
    elif what == "nested":  # a harness inside the candidate's own region: one region
        from triton.testing import do_bench

        from krex_runtime.client import region

        with region():
            measured[what] = [do_bench(kernel), do_bench(kernel)]
cuda.synchronize()
watched = ("triton", "torch", "cupyx", "suite_helper", "krex_runtime.tenant.region", "krex_runtime.tenant.auto_region")
print(json.dumps({
    "measured": measured,
    "modules": sorted(m for m in sys.modules if m.startswith(watched)),
    "all_modules": sorted(sys.modules),
    "user_sitecustomize": os.environ.get("USER_SITECUSTOMIZE_RAN") == "1",
    "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
}))
