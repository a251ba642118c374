"""How long after a process's GPU work stops NVML's per-process utilisation
samples still show it: whether those samples can say who ran inside a region
(regions/certificate.py, docs/regions.md: on the H200 they cannot). Needs a
GPU, torch and nvidia-ml-py; takes ~20-30 s.

A child process runs bursts of matmuls (each burst ends with a synchronize
and prints its start and stop, wall clock) separated by idle gaps; this
process polls nvmlDeviceGetProcessUtilization every 10 ms and keeps every
sample of the child. Per burst the table gives the last sample above 0 %
stamped after the stop and before the next burst (`lag`: how long a sample
can show work that has already ended) and the first stamped after the
start. The summary compares the longest lag with the GPU's own utilisation
sample period (nvmlDeviceGetSamples); `--dump` prints every sample.

    python3 benchmarks/nvml_sample_lag.py [--gpu 0] [--bursts 0.05,0.2,1.0] [--idle 1.5] [--dump]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from itertools import pairwise
from typing import Any

CHILD = r"""
import json, sys, time, torch
bursts, idle = [float(b) for b in sys.argv[1].split(",")], float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda")
for _ in range(3):
    a @ a
torch.cuda.synchronize()
print(json.dumps({"ready": time.time()}), flush=True)
time.sleep(idle)
for b in bursts:
    start = time.time()
    while time.time() - start < b:
        a @ a
        torch.cuda.synchronize()
    print(json.dumps({"start": start, "stop": time.time()}), flush=True)
    time.sleep(idle)
print(json.dumps({"done": time.time()}), flush=True)
"""


def sample_period_us(nvml: Any, handle: Any) -> int | None:
    """The median spacing of the GPU's utilisation samples; None: unknown."""
    try:
        _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    except nvml.NVMLError:
        return None
    stamps = sorted({int(s.timeStamp) for s in samples})
    gaps = sorted(b - a for a, b in pairwise(stamps))
    return gaps[len(gaps) // 2] if gaps else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--bursts", default="0.05,0.2,1.0,0.05,0.5,0.1")
    ap.add_argument("--idle", type=float, default=1.5)
    ap.add_argument("--dump", action="store_true", help="also print every sample of the child")
    args = ap.parse_args()

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(args.gpu))
    child = subprocess.Popen([sys.executable, "-c", CHILD, args.bursts, str(args.idle)], stdout=subprocess.PIPE,
                             env=env)
    os.set_blocking(child.stdout.fileno(), False)  # type: ignore[union-attr]
    lines: list[dict] = []
    samples: dict[int, int] = {}  # the child's samples: stamp (us) -> SM %
    buffered = ""
    while True:
        buffered += (child.stdout.read() or b"").decode()  # type: ignore[union-attr]
        *done, buffered = buffered.split("\n")
        lines += [json.loads(x) for x in done if x.strip()]
        try:
            for s in pynvml.nvmlDeviceGetProcessUtilization(handle, 0):
                if int(s.pid) == child.pid:
                    samples[int(s.timeStamp)] = max(samples.get(int(s.timeStamp), 0), int(s.smUtil))
        except pynvml.NVMLError:
            pass  # no sample yet
        if any("done" in x for x in lines) or child.poll() is not None:
            break
        time.sleep(0.01)
    child.wait()
    period = sample_period_us(pynvml, handle)
    period_ms = period / 1000 if period is not None else float("nan")

    stamps = sorted(samples)
    spacing = sorted(b - a for a, b in pairwise(stamps))
    print(f"GPU {args.gpu} ({pynvml.nvmlDeviceGetName(handle)}): {len(stamps)} samples of the child")
    print(f"the GPU's utilisation sample period: {period_ms:.1f} ms")
    if spacing:
        print(f"the child's sample spacing: median {spacing[len(spacing) // 2] / 1000:.1f} ms, "
              f"min {spacing[0] / 1000:.1f} ms, max {spacing[-1] / 1000:.1f} ms")
    print()
    print(f"{'burst s':>8} {'first after start ms':>21} {'lag after stop ms':>18} {'its SM %':>9} {'samples in burst':>17}")
    worst = 0.0
    for x in (x for x in lines if "start" in x):
        start_us, stop_us = x["start"] * 1e6, x["stop"] * 1e6
        ends = [y["start"] * 1e6 for y in lines if "start" in y and y["start"] > x["start"]] + [float("inf")]
        busy = [(t, u) for t, u in samples.items() if u > 0 and start_us <= t < min(ends)]
        first = min((t for t, _ in busy), default=None)
        after = [(t, u) for t, u in busy if t > stop_us]
        last = max(after, default=None)
        lag = (last[0] - stop_us) / 1000 if last else 0.0
        worst = max(worst, lag)
        inside = sum(1 for t in samples if start_us <= t <= stop_us)
        first_s = f"{(first - start_us) / 1000:.1f}" if first is not None else "none"
        print(f"{x['stop'] - x['start']:>8.2f} {first_s:>21} {lag:>18.1f} {last[1] if last else '-':>9} {inside:>17}")
    if args.dump:
        t0 = min((x["start"] for x in lines if "start" in x), default=0) * 1e6
        print("the child's samples (ms after the first start: SM %):")
        print(" ".join(f"{(t - t0) / 1000:.0f}:{samples[t]}" for t in stamps))
    print()
    print(f"longest lag {worst:.1f} ms: {worst / period_ms:.1f} sample periods")


if __name__ == "__main__":
    main()
