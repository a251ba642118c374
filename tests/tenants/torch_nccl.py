"""Times an NCCL all-reduce across two GPUs from one process (torch.cuda.nccl,
one tensor per device), inside a region over both GPUs: the multi-GPU twin of
torch_regions.py, for a command placed with `--gpus 2`.

Prints one JSON line: {"times_ms": [...], "region": bool, "devices": n} (or
{"error": code, "reason": ...}). Without the runtime, `region()` is a no-op,
so the same script gives the native figure. --no-region times it without a
region (shared, unprotected).
"""

import argparse
import json

import torch
import torch.cuda.nccl as nccl

from krex_runtime.client import RegionError, region

p = argparse.ArgumentParser()
p.add_argument("--mib", type=int, default=256, help="size of each GPU's tensor")
p.add_argument("--repeats", type=int, default=30)
p.add_argument("--no-region", action="store_true")
args = p.parse_args()

devices = list(range(torch.cuda.device_count()))
if len(devices) < 2:
    print(json.dumps({"error": "ENODEV", "reason": f"{len(devices)} GPU visible, need 2"}), flush=True)
    raise SystemExit(1)
elements = args.mib * (1 << 20) // 4
tensors = [torch.ones(elements, device=f"cuda:{d}", dtype=torch.float32) for d in devices]
# Warm: NCCL makes its communicators at the first call (outside the region).
for _ in range(3):
    nccl.all_reduce(tensors)
for d in devices:
    torch.cuda.synchronize(d)


def timed() -> list[float]:
    """Milliseconds per all-reduce: the slowest device's span between events on its stream."""
    times = []
    for _ in range(args.repeats):
        starts = [torch.cuda.Event(enable_timing=True) for _ in devices]
        ends = [torch.cuda.Event(enable_timing=True) for _ in devices]
        for d, e in zip(devices, starts, strict=True):
            with torch.cuda.device(d):
                e.record()
        nccl.all_reduce(tensors)
        for d, e in zip(devices, ends, strict=True):
            with torch.cuda.device(d):
                e.record()
        for e in ends:
            e.synchronize()
        times.append(max(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)))
    return times


try:
    if args.no_region:
        times = timed()
    else:
        with region():
            times = timed()
except RegionError as exc:
    print(json.dumps({"error": exc.code, "reason": exc.reason}), flush=True)
    raise SystemExit(0) from None
print(json.dumps({"times_ms": times, "region": not args.no_region, "devices": len(devices)}), flush=True)
