"""Auto-regions on a real GPU: an unmodified do_bench candidate and a torch
Timer candidate (benchmarks/tenants/harness_candidate.py) timed natively
(alone on GPU 0, no runtime), under `krex run --auto-region` while 15 busy
tenants share the GPU, and natively again (the native repeat: the GPU's own
run-to-run noise), plus both candidates without --auto-region (their
timings are counted unprotected and inflated). Each measurement carries the
SM clock read right after it.

  python benchmarks/auto_region_fidelity.py [--reps 5] [--settle-s S] [--kinds timer] [--json FILE]

Needs torch and triton in the Python that runs it. Prints one table: median
ms native, under krex, the ratio, what the runtime wrapped, the unprotected
timings it counted, and the region verdicts of the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from krex_runtime.testing.local_runtime import Runtime, command, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

HERE = Path(__file__).resolve().parent
CANDIDATE = str(HERE / "tenants" / "harness_candidate.py")
BUSY = str(HERE.parent / "tests" / "tenants" / "torch_busy.py")
PY = sys.executable


def native(kind: str, reps: int) -> list[dict]:
    out = []
    for _ in range(reps):
        done = subprocess.run([PY, CANDIDATE, kind], capture_output=True, text=True, check=True, timeout=600)
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def under_krex(rt: Runtime, kind: str, reps: int, auto: bool) -> tuple[list[dict], list[dict]]:
    times, results = [], []
    for _ in range(reps):
        flag = ["--auto-region"] if auto else ["--no-auto-region"]
        done = subprocess.run([*command("krex"), "run", "--json", "--gpu", "0", *flag, "--", PY, CANDIDATE, kind],
                              env=rt.env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"krex run failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout)  # one document, the command's output inside
        times.append(json.loads(result["stdout"].strip().splitlines()[-1]))
        results.append(result)
    return times, results


def median_ms(measurements: list[dict]) -> float:
    return statistics.median(m["ms"] for m in measurements)


def median_cycles(measurements: list[dict]) -> float | None:
    """Median of ms x SM MHz: the time at a common clock. The Timer candidate's
    back-to-back bf16 matmuls run at the power cap, where the clock moves by
    ~8% between runs and the time with it; at a fixed clock a compute-bound
    kernel's time scales as 1/clock, so this separates power-state noise from
    interference. None when a measurement has no clock."""
    if any(m.get("sm_clock_mhz") is None for m in measurements):
        return None
    return statistics.median(m["ms"] * m["sm_clock_mhz"] for m in measurements)


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def clock_range(measurements: list[dict]) -> str:
    """The SM clocks seen, as low-high (one figure when they agree, ? without NVML)."""
    clocks = [m.get("sm_clock_mhz") for m in measurements if m.get("sm_clock_mhz") is not None]
    if not clocks:
        return "?"
    return str(min(clocks)) if min(clocks) == max(clocks) else f"{min(clocks)}-{max(clocks)}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--settle-s", type=float, default=0.0, help="the runtime's regions.settle_max_s (default 0)")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--kinds", default="do_bench,timer", help="candidates, comma-separated (default both)")
    args = p.parse_args()
    kinds = args.kinds.split(",")
    rows = []
    base = {kind: native(kind, args.reps) for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(Path(tmp) / "rt", sim=0, visible=(0,), policy="krex", slots=16,
                     extra_config=f"[regions]\nsettle_max_s = {args.settle_s}\n").start()
        try:
            with rt.client(timeout_s=30) as c:
                ids = [c.call("submit", {"argv": [PY, BUSY, "4096", "4"], "gpu": 0})["id"] for _ in range(15)]
            outputs = [rt.run_dir / "output" / f"{i}.stdout" for i in ids]
            wait_until(lambda: all(o.exists() and "ready" in o.read_text() for o in outputs), 300, "busy tenants", 0.5)
            measured = []
            for kind, auto in [(k, a) for a in (True, False) for k in kinds]:
                measured.append((kind, auto, *under_krex(rt, kind, args.reps, auto)))
            with rt.client() as c:
                for i in ids:
                    c.call("cancel", {"id": i})
        finally:
            rt.stop()
        repeat = {kind: native(kind, args.reps) for kind in kinds}
        for kind, auto, times, results in measured:
            n, k = median_ms(base[kind]), median_ms(times)
            rows.append({"kind": kind, "auto_region": auto, "native_ms": n, "krex_ms": k, "ratio": k / n,
                         "repeat_ms": median_ms(repeat[kind]), "repeat_ratio": median_ms(repeat[kind]) / n,
                         "clock_ratio": ratio(median_cycles(times), median_cycles(base[kind])),
                         "repeat_clock_ratio": ratio(median_cycles(repeat[kind]), median_cycles(base[kind])),
                         "native": base[kind], "krex": times, "repeat": repeat[kind],
                         "wrapped": results[-1]["auto_regions"],
                         "unprotected_timings": sum(r["unprotected_timings"] for r in results)})
        verdicts: dict[str, int] = {}
        for e in read_trace(rt.trace_path).events:
            if e["type"] == "region_released" and e.get("kind") == "region":
                verdicts[e.get("verdict", "unknown")] = verdicts.get(e.get("verdict", "unknown"), 0) + 1
    print("# auto-regions on GPU 0, 15 busy tenants (bf16 4096 matmuls) vs native alone; medians of", args.reps,
          f"; settle {args.settle_s:g} s")
    print(f"{'candidate':<10} {'auto':<5} {'native ms':>10} {'krex ms':>10} {'ratio':>7} {'repeat':>7} "
          f"{'SM MHz n/k/r':>16} {'at clk':>7} {'rep clk':>7} {'unprot.':>8}  wrapped")
    for r in rows:
        clocks = "/".join(clock_range(r[k]) for k in ("native", "krex", "repeat"))
        at_clock = "/".join("-" if r[k] is None else f"{r[k]:.3f}" for k in ("clock_ratio", "repeat_clock_ratio"))
        at_clock = " ".join(f"{x:>7}" for x in at_clock.split("/"))
        print(f"{r['kind']:<10} {r['auto_region']!s:<5} {r['native_ms']:>10.4f} {r['krex_ms']:>10.4f} "
              f"{r['ratio']:>7.3f} {r['repeat_ratio']:>7.3f} {clocks:>16} {at_clock} {r['unprotected_timings']:>8}  "
              f"{','.join(r['wrapped']) or '-'}")
    print("region verdicts:", json.dumps(verdicts))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "verdicts": verdicts, "settle_s": args.settle_s}, indent=1))


if __name__ == "__main__":
    main()
