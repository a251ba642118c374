"""A tenant that times a bf16 matmul inside regions on a real GPU (the GPU twin of regions.py).

Prints one JSON line per region: {"region": n, "times_ms": [...]} or {"region": n, "error": code}.
"""

import json
import random
import time

import torch
from region_arguments import region_arguments

from krex_runtime.client import RegionError, region

p = region_arguments(repeats=5, noise="matmuls left queued before each region")
p.add_argument("--n", type=int, default=4096)
p.add_argument("--warm-s", type=float, default=0.0, help="keep the GPU busy this long before measuring")
args = p.parse_args()

a = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
# Warm: cuBLAS picks its kernel and an idle GPU's clocks come up (an idle
# H200 sits at a few hundred MHz). --warm-s keeps it busy longer; a long
# warm-up of large matmuls reaches the power cap, which slows them too.
for _ in range(3):
    a @ b
deadline = time.monotonic() + args.warm_s
while time.monotonic() < deadline:
    a @ b
    torch.cuda.synchronize()
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
rng = random.Random()
for n in range(args.regions):
    if args.pause_ms:
        time.sleep(rng.uniform(0, args.pause_ms) / 1000)
    for _ in range(args.noise):
        a @ b
    try:
        with region():
            times = []
            for _ in range(args.repeats):
                start.record()
                a @ b
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            time.sleep(args.hold_s)
    except RegionError as exc:
        print(json.dumps({"region": n, "error": exc.code, "reason": exc.reason}), flush=True)
        continue
    print(json.dumps({"region": n, "times_ms": times}), flush=True)
torch.cuda.synchronize()
