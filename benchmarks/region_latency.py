"""Region entry and exit latency with 0, 4 and 15 other busy tenants, per gate backend.

Starts a real runtime (policy krex) per configuration, N busy tenants on GPU 0,
then a probe tenant that enters and leaves R regions (one small kernel inside)
and times both from its side. Prints one table; the runtime's own breakdown of
entry (quiesce, drain, freeze) comes from the trace.

  simulator:  python benchmarks/region_latency.py --sim
  real GPU:   python benchmarks/region_latency.py          (torch tenants, GPU 0)
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

import scaffold

from krex_runtime.testing.local_runtime import Runtime
from krex_runtime.wire.trace.jsonl import read_trace


def measure(root: Path, sim: bool, backend: str, others: int, regions: int) -> dict:
    rt = Runtime(
        root / f"{backend}-{others}",
        sim=1 if sim else 0,
        policy="krex",
        slots=others + 1,
        extra_config=f'[regions]\ngate_backend = "{backend}"\n',
    ).start()
    with scaffold.stopped_after(rt, sim):
        busy = scaffold.start_busy(rt, others, gpu=not sim)
        client_side = scaffold.probe_regions(rt, regions, not sim, 900)
        scaffold.cancel(rt, busy)
        time.sleep(0.5)
    granted = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_granted"]
    released = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_released"]
    enter, leave = client_side["enter_ms"], client_side["exit_ms"]
    return {
        "backend": backend,
        "others": others,
        "enter_p50": scaffold.rank_quantile(enter, 0.5),
        "enter_p99": scaffold.rank_quantile(enter, 0.99),
        "exit_p50": scaffold.rank_quantile(leave, 0.5),
        "exit_p99": scaffold.rank_quantile(leave, 0.99),
        "drain_p50": statistics.median(e["drain_s"] * 1e3 for e in granted),
        "freeze_p50": statistics.median(e["freeze_s"] * 1e3 for e in granted),
        "thaw_p50": statistics.median(e["thaw_s"] * 1e3 for e in released),
        "n": len(enter),
    }


def main() -> None:
    p = scaffold.latency_arguments(__doc__, regions=200)
    p.add_argument("--sim", action="store_true", help="simulated GPU and tenants")
    p.add_argument("--others", default="0,4,15")
    args = p.parse_args()
    others = [int(n) for n in args.others.split(",")]
    rows = scaffold.rows_per_backend(args.backends, others,
                            lambda folder, backend, n: measure(folder, args.sim, backend, n, args.regions))
    where = "simulated GPU" if args.sim else "real GPU 0"
    print(f"# region latency — {platform.node()}, {where}, {args.regions} regions each; tenant-side ms")
    print(f"{'backend':<12} {'others':>6} {'enter p50':>10} {'enter p99':>10} {'exit p50':>9} {'exit p99':>9} "
          f"{'drain p50':>10} {'freeze p50':>10} {'thaw p50':>9}")
    for r in rows:
        print(f"{r['backend']:<12} {r['others']:>6} {r['enter_p50']:>10.2f} {r['enter_p99']:>10.2f} "
              f"{r['exit_p50']:>9.2f} {r['exit_p99']:>9.2f} {r['drain_p50']:>10.2f} {r['freeze_p50']:>10.2f} "
              f"{r['thaw_p50']:>9.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
