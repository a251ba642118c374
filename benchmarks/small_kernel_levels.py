"""Where a small kernel's run-to-run levels come from: the process, the
placement of its buffers, or the L2 flush between repeats. Needs a GPU,
torch and triton; no runtime (one process at a time, as a native run).

In native runs the median of a <0.1 ms candidate lands on one of two levels
2.5-3.5% apart (docs/BENCHMARKS.md, run 7). This script runs P processes one
after another; each builds every candidate B times (fresh inputs each time,
the earlier ones kept alive so the new ones land elsewhere) and times each
build twice with `krex_bench.candidate.time_launches`, the command's own
loop (an L2 flush before every launch), then once without the flush. The
table splits the spread three ways:

- `same build`: the two timings of one build (the floor);
- `placements`: between the builds of one process (buffer placement);
- `processes`: between the processes' first builds (what a native run sees).

    python3 benchmarks/small_kernel_levels.py [--candidates gelu/b512w4,rmsnorm/row_w2] \
        [--processes 6] [--placements 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

DEFAULT = "gelu/b512w4,rmsnorm/row_w2,rmsnorm/row_w4,rmsnorm/rows4_w8,gelu/torch"


def child(candidates: list[str], placements: int, repeats: int) -> None:
    import time

    import torch

    from krex_bench import kernels, workload
    from krex_bench.candidate import L2_FLUSH_BYTES, WARMUP_S, clock_reader, nvml_device, time_launches

    clock = clock_reader(nvml_device())
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    keep = []
    for key in candidates:
        cand = workload.candidate(*key.split("/", 1))
        n = repeats or workload.BY_NAME[cand.problem].repeats
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for b in range(placements):
            built = kernels.build(cand)
            keep.append(built)  # alive, so the next build's buffers go elsewhere
            out = built.run()
            torch.cuda.synchronize()
            until = time.monotonic() + WARMUP_S
            while time.monotonic() < until:
                built.run()
                torch.cuda.synchronize()
            first = time_launches(built.run, flush, starts, ends)
            second = time_launches(built.run, flush, starts, ends)
            warm = time_launches(built.run, torch.empty(0, device="cuda"), starts, ends)
            print(json.dumps({
                "candidate": key, "placement": b, "ptr": out.data_ptr() if hasattr(out, "data_ptr") else None,
                "first_ms": statistics.median(first), "second_ms": statistics.median(second),
                "no_flush_ms": statistics.median(warm), "min_ms": min(first + second),
                "sm_clock_mhz": clock(),
            }), flush=True)


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1 if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", default=DEFAULT)
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--placements", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=0, help="timed launches per timing (default: the problem's)")
    ap.add_argument("--json", help="write every record here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    candidates = args.candidates.split(",")
    if args.child:
        child(candidates, args.placements, args.repeats)
        return
    records: list[dict[str, Any]] = []
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(here), os.environ.get("PYTHONPATH")])))
    for proc in range(args.processes):
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--candidates", args.candidates,
             "--placements", str(args.placements), "--repeats", str(args.repeats)],
            capture_output=True, text=True, env=env, check=False,
        )
        if out.returncode:
            sys.exit(f"process {proc} failed ({out.returncode}):\n{out.stderr[-2000:]}")
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                records.append(dict(json.loads(line), process=proc))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    print("| candidate | median us | same build | placements (worst process) | processes | no flush: placements / processes | SM MHz |")
    print("|---|---|---|---|---|---|---|")
    for key in candidates:
        mine = [r for r in records if r["candidate"] == key]
        firsts = [r["first_ms"] for r in mine]
        same = max(abs(r["second_ms"] / r["first_ms"] - 1) for r in mine)
        per_proc = [[r for r in mine if r["process"] == p] for p in range(args.processes)]
        placements = max(spread([r["first_ms"] for r in rs]) for rs in per_proc)
        processes = spread([rs[0]["first_ms"] for rs in per_proc])
        nf_place = max(spread([r["no_flush_ms"] for r in rs]) for rs in per_proc)
        nf_proc = spread([rs[0]["no_flush_ms"] for rs in per_proc])
        clocks = sorted({r["sm_clock_mhz"] for r in mine if r["sm_clock_mhz"]})
        print(f"| {key} | {statistics.median(firsts) * 1000:.2f} | {same:.2%} | {placements:.2%} | {processes:.2%} "
              f"| {nf_place:.2%} / {nf_proc:.2%} | {clocks[0] if clocks else '?'}-{clocks[-1] if clocks else '?'} |")
    print()
    print("Per process, first timing of each placement (us):")
    for key in candidates:
        print(key)
        for p in range(args.processes):
            row = [r for r in records if r["candidate"] == key and r["process"] == p]
            print(f"  process {p}: " + "  ".join(f"{r['first_ms'] * 1000:.2f}/{r['second_ms'] * 1000:.2f}" for r in row))


if __name__ == "__main__":
    main()
