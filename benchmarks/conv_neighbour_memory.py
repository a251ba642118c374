"""Whether a convolution's time depends on the GPU memory another process
holds: cuDNN's algorithm (and its workspace) is chosen when the call is first
made, and PyTorch falls back to an algorithm with a smaller workspace when
the preferred one's cannot be allocated. Needs a GPU and torch; no runtime.

For each condition (no neighbour; a neighbour process holding all but
`--leave` GiB of the GPU's memory, idle) and each `torch.backends.cudnn.
benchmark` setting, a fresh process builds a 3-D transposed convolution,
times it as a `krex bench` command does (an L2 flush before every launch,
CUDA events, the median) and names the GPU kernels one call launches
(torch.profiler). A different kernel list under a neighbour means the
measurement depends on what another tenant holds.

    python3 benchmarks/conv_neighbour_memory.py [--shape 8,64,64,32,64,64] [--leave 4,1] [--repeats 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

HOLDER = r"""
import sys, torch
free, total = torch.cuda.mem_get_info()
leave = int(float(sys.argv[1]) * (1 << 30))
held = torch.empty(max(0, free - leave), dtype=torch.uint8, device="cuda")
print("ready", flush=True)
sys.stdin.read()
"""


def measure(shape: list[int], benchmark: bool, repeats: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from krex_bench.candidate import L2_FLUSH_BYTES, clock_reader, nvml_device, time_launches

    torch.backends.cudnn.benchmark = benchmark
    n, cin, cout, d, h, w = shape
    x = torch.randn(n, cin, d, h, w, device="cuda")
    conv = torch.nn.ConvTranspose3d(cin, cout, 3, stride=1, padding=1).cuda()
    with torch.no_grad():
        conv(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            conv(x)
            torch.cuda.synchronize()
        kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for _ in range(3):
            conv(x)
        times = time_launches(lambda: conv(x), flush, starts, ends)
    free, _ = torch.cuda.mem_get_info()
    return {"median_ms": statistics.median(times), "min_ms": min(times), "sm_clock_mhz": clock_reader(nvml_device())(),
            "free_gib": free / (1 << 30), "kernels": kernels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="8,64,64,32,64,64", help="N,Cin,Cout,D,H,W (kernel 3, padding 1)")
    ap.add_argument("--leave", default="4,1", help="GiB a neighbour leaves free, per condition")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--runs", type=int, default=1, help="fresh processes per condition and setting")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    shape = [int(v) for v in args.shape.split(",")]
    if args.child is not None:
        print(json.dumps(measure(shape, args.child == "1", args.repeats)), flush=True)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(here), os.environ.get("PYTHONPATH")])))
    rows = []
    for leave in [None] + [float(v) for v in args.leave.split(",")]:
        holder = None
        if leave is not None:
            holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(leave)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            if holder.stdout.readline().strip() != "ready":
                sys.exit("the memory holder did not start")
        try:
            for benchmark in (False, True):
                for run in range(args.runs):
                    out = subprocess.run([sys.executable, __file__, "--child", "1" if benchmark else "0",
                                          "--shape", args.shape, "--repeats", str(args.repeats)],
                                         capture_output=True, text=True, env=env, check=False)
                    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("{")), None)
                    result = json.loads(line) if line else {"error": out.stderr[-800:]}
                    rows.append(dict(result, neighbour_leaves_gib=leave, benchmark=benchmark, run=run))
                    print(json.dumps({k: v for k, v in rows[-1].items() if k != "kernels"}), file=sys.stderr, flush=True)
        finally:
            if holder:
                holder.stdin.close()
                holder.wait(timeout=30)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"ConvTranspose3d {args.shape} (N,Cin,Cout,D,H,W), kernel 3, float32 (cuDNN's TF32 default)")
    print("| neighbour leaves GiB | cudnn.benchmark | run | median ms | min ms | SM MHz | free GiB | kernels |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['neighbour_leaves_gib']} | {r['benchmark']} | {r['run']} | error: {r['error'][-200:]!r} |")
            continue
        names = "; ".join(k[:60] for k in r["kernels"])
        print(f"| {r['neighbour_leaves_gib'] if r['neighbour_leaves_gib'] is not None else 'none'} | {r['benchmark']} "
              f"| {r['run']} | {r['median_ms']:.3f} | {r['min_ms']:.3f} | {r['sm_clock_mhz']} | {r['free_gib']:.1f} | {names} |")


if __name__ == "__main__":
    main()
