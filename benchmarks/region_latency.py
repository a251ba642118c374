"""Region entry and exit latency with 0, 4 and 15 other busy tenants, per gate backend.

Starts a real runtime (policy krex) per configuration, N busy tenants on GPU 0,
then a probe tenant that enters and leaves R regions (one small kernel inside)
and times both from its side. Prints one table; the runtime's own breakdown of
entry (quiesce, drain, freeze) comes from the trace.

  simulator:  python benchmarks/region_latency.py --sim
  real GPU:   python benchmarks/region_latency.py          (torch tenants, GPU 0)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace import read_trace

HERE = Path(__file__).resolve().parent
TENANTS = HERE.parent / "tests" / "tenants"
PY = sys.executable


def q(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def busy_argv(sim: bool) -> list[str]:
    if sim:
        return [PY, str(TENANTS / "busy.py"), "2000", "4"]
    return [PY, str(TENANTS / "torch_busy.py"), "4096", "4"]


def measure(root: Path, sim: bool, backend: str, others: int, regions: int) -> dict:
    rt = Runtime(
        root / f"{backend}-{others}",
        sim=1 if sim else 0,
        policy="krex",
        slots=others + 1,
        extra_config=f'[regions]\ngate_backend = "{backend}"\n',
    ).start()
    try:
        with rt.client(timeout_s=30) as c:
            busy = [c.call("submit", {"argv": busy_argv(sim), "gpu": 0})["id"] for _ in range(others)]
        outputs = [rt.run_dir / "output" / f"{b}.stdout" for b in busy]
        wait_until(lambda: all(p.exists() and "ready" in p.read_text() for p in outputs), 300, "busy tenants", interval_s=0.5)
        probe = rt.krex(
            "run", "--gpu", "0", "--", PY, str(HERE / "tenants" / "latency_probe.py"),
            "--regions", str(regions), "--device", "sim" if sim else "torch", timeout=900,
        )
        if probe.returncode != 0:
            raise RuntimeError(f"probe failed: {probe.stderr}")
        client_side = json.loads(probe.stdout.strip().splitlines()[-1])
        with rt.client() as c:
            for b in busy:
                c.call("cancel", {"id": b})
        time.sleep(0.5)
    finally:
        rt.stop()
        if sim:
            remove_device(rt.device)
    granted = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_granted"]
    released = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_released"]
    enter, leave = client_side["enter_ms"], client_side["exit_ms"]
    return {
        "backend": backend,
        "others": others,
        "enter_p50": q(enter, 0.5),
        "enter_p99": q(enter, 0.99),
        "exit_p50": q(leave, 0.5),
        "exit_p99": q(leave, 0.99),
        "drain_p50": statistics.median(e["drain_s"] * 1e3 for e in granted),
        "freeze_p50": statistics.median(e["freeze_s"] * 1e3 for e in granted),
        "thaw_p50": statistics.median(e["thaw_s"] * 1e3 for e in released),
        "n": len(enter),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sim", action="store_true", help="simulated GPU and tenants")
    p.add_argument("--backends", default="preload,driver-lock")
    p.add_argument("--others", default="0,4,15")
    p.add_argument("--regions", type=int, default=200)
    p.add_argument("--json", metavar="FILE", help="also write the rows here")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for others in (int(n) for n in args.others.split(",")):
                rows.append(measure(Path(tmp), args.sim, backend, others, args.regions))
                print(f"  done: {backend} with {others} others", file=sys.stderr, flush=True)
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
