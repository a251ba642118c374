"""A tenant that times a bf16 matmul inside regions on a real GPU (the GPU twin of regions.py).

Prints one JSON line per region: {"region": n, "times_ms": [...]} or {"region": n, "error": code}.
"""

import argparse
import json
import random
import time

import torch

from krex_runtime.client import RegionError, region

p = argparse.ArgumentParser()
p.add_argument("--regions", type=int, default=3)
p.add_argument("--n", type=int, default=4096)
p.add_argument("--repeats", type=int, default=5)
p.add_argument("--pause-ms", type=float, default=0.0)
p.add_argument("--noise", type=int, default=0, help="matmuls left queued before each region")
p.add_argument("--hold-s", type=float, default=0.0)
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
