"""A tenant placed on a set of simulated GPUs (`krex submit --gpus N`): it sees
every GPU of its set and uses them all.

Default: measures a kernel on each of its GPUs inside each region, like a
multi-GPU benchmark's timing loop; prints one JSON line per region:
{"region": n, "gpus": "0,1", "times_ms": {"0": [...], "1": [...]}} (or the
region's error); exits 0.

--busy: keeps every GPU of its set busy until killed (a thread per GPU
queues kernels and synchronises), printing "ready" once each GPU finished
a batch.
"""

import json
import os
import random
import threading
import time

from region_arguments import region_arguments

from krex_runtime.client import RegionError, region
from krex_runtime.sim.simcuda import SimCuda

p = region_arguments(repeats=3, noise="kernels left queued on each GPU before each region")
p.add_argument("--kernel-us", type=float, default=500)
p.add_argument("--busy", action="store_true")
args = p.parse_args()

gpus = os.environ.get("KREX_GPUS", os.environ.get("KREX_GPU", "0"))
devices = [SimCuda(i) for i in range(len(gpus.split(",")))]  # its set, as CUDA_VISIBLE_DEVICES numbers it
kernel_ns = int(args.kernel_us * 1000)


def busy(cuda: SimCuda, ready: threading.Event) -> None:
    cuda.make_current()
    stream = cuda.stream()
    while True:
        for _ in range(4):
            cuda.launch(kernel_ns, stream=stream)
        cuda.stream_synchronize(stream)
        ready.set()


if args.busy:
    flags = [threading.Event() for _ in devices]
    workers = [threading.Thread(target=busy, args=(d, f), daemon=True) for d, f in zip(devices, flags, strict=True)]
    for w in workers:
        w.start()
    for f in flags:
        f.wait()
    print("ready", flush=True)
    for w in workers:
        w.join()

noise = []
for d in devices:
    d.make_current()
    noise.append(d.stream())
    d.time_kernel(kernel_ns, repeats=1)  # warm: the first launch sets up the stream
rng = random.Random()
for n in range(args.regions):
    if args.pause_ms:
        time.sleep(rng.uniform(0, args.pause_ms) / 1000)
    for d, s in zip(devices, noise, strict=True):
        d.make_current()
        for _ in range(args.noise):
            d.launch(int(args.kernel_us * 1000), stream=s)
    try:
        with region():
            times = {}
            for i, d in enumerate(devices):
                d.make_current()
                times[str(i)] = d.time_kernel(kernel_ns, repeats=args.repeats)
            time.sleep(args.hold_s)
    except RegionError as exc:
        print(json.dumps({"region": n, "gpus": gpus, "error": exc.code, "reason": exc.reason}), flush=True)
        continue
    print(json.dumps({"region": n, "gpus": gpus, "times_ms": times}), flush=True)
for d in devices:
    d.make_current()
    d.synchronize()
