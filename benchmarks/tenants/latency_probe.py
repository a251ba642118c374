"""Times region entry and exit from the tenant's side: the latency a benchmark sees.

argv: --regions N --device sim|torch [--pause-ms M: up to M ms, at random, between
regions, so that other tenants run between them]. Inside each region: one small kernel and a
synchronise, as a minimal timing loop. Prints one JSON line: {"enter_ms": [...], "exit_ms": [...]}.
"""

import argparse
import json
import random
import time

from krex_runtime.client import region

p = argparse.ArgumentParser()
p.add_argument("--regions", type=int, default=100)
p.add_argument("--device", choices=["sim", "torch"], default="sim")
p.add_argument("--pause-ms", type=float, default=0.0)
args = p.parse_args()

if args.device == "torch":
    import torch

    x = torch.ones(1024, device="cuda")

    def body() -> None:
        x.add_(1)
        torch.cuda.synchronize()
else:
    from krex_runtime.sim.simcuda import SimCuda

    cuda = SimCuda()

    def body() -> None:
        cuda.launch(20_000)
        cuda.synchronize()

body()
enter, leave = [], []
rng = random.Random(1)
for _ in range(args.regions):
    if args.pause_ms:
        time.sleep(rng.uniform(0, args.pause_ms) / 1000)
    r = region()
    t0 = time.perf_counter()
    r.__enter__()
    t1 = time.perf_counter()
    body()
    t2 = time.perf_counter()
    r.__exit__(None, None, None)
    t3 = time.perf_counter()
    enter.append((t1 - t0) * 1e3)
    leave.append((t3 - t2) * 1e3)
print(json.dumps({"enter_ms": enter, "exit_ms": leave}))
