"""A tenant in start-up on the simulated driver: "imports" (a sleep), context
creation and a module load that take as long as told (the simulator's
KREX_SIM_CTX_CREATE_MS and KREX_SIM_MODULE_LOAD_MS, set for its own calls),
then a few kernels. With --lazy-ms the first launch of a new function loads
its code that long (KREX_SIM_LAZY_LOAD_MS: CUDA's lazy loading), between
"launching" and "launched".

Without --warm the first context is the primary one (SimCuda(), as a fresh
process starts). With --warm the tenant first runs a kernel in its primary
context and prints "ready", then creates a second context with cuCtxCreate:
a tenant with a context to drain, inside a long call. Around each slow call
it prints "creating|created|loading|loaded <CLOCK_MONOTONIC ns>", so a test
can tell what happened while it was inside; "done" at the end.
"""

import argparse
import ctypes
import os
import time

from krex_runtime.sim.driver import HANDLE
from krex_runtime.sim.simcuda import SimCuda

p = argparse.ArgumentParser()
p.add_argument("--import-ms", type=float, default=0)
p.add_argument("--ctx-ms", type=int, default=0)
p.add_argument("--module-ms", type=int, default=0)
p.add_argument("--kernels", type=int, default=2)
p.add_argument("--kernel-us", type=float, default=500)
p.add_argument("--lazy-ms", type=int, default=0)
p.add_argument("--warm", action="store_true")
args = p.parse_args()


def say(what: str) -> None:
    print(what, time.monotonic_ns(), flush=True)


time.sleep(args.import_ms / 1000)
if args.warm:
    cuda = SimCuda()
    cuda.time_kernel(int(args.kernel_us * 1000), repeats=1)
    print("ready", flush=True)
    os.environ["KREX_SIM_CTX_CREATE_MS"] = str(args.ctx_ms)
    say("creating")
    ctx = HANDLE()
    cuda.drv("cuCtxCreate_v4", ctypes.byref(ctx), None, 0, cuda.device)  # pushed: current on this thread
    say("created")
else:
    os.environ["KREX_SIM_CTX_CREATE_MS"] = str(args.ctx_ms)
    say("creating")
    cuda = SimCuda()  # the primary context; its module load is not slowed yet
    say("created")
os.environ["KREX_SIM_MODULE_LOAD_MS"] = str(args.module_ms)
say("loading")
module = HANDLE()
cuda.drv("cuModuleLoadData", ctypes.byref(module), b"krex simulated module")
say("loaded")
if args.lazy_ms:
    os.environ["KREX_SIM_LAZY_LOAD_MS"] = str(args.lazy_ms)
    say("launching")
    cuda.launch(int(args.kernel_us * 1000), name="lazy_kernel")
    say("launched")
for _ in range(args.kernels):
    cuda.launch(int(args.kernel_us * 1000))
cuda.drv("cuCtxSynchronize")
print("done", flush=True)
