"""The workload's command on a simulated GPU: `python -m krex_bench.sim_candidate PROBLEM CANDIDATE`.

The same shape and the same JSON line as krex_bench/candidate.py, with the
simulated CUDA driver instead of torch: a short build, a check, and the
candidate's simulated kernel timed inside `region()`. It lets the evaluation's
runner and report be exercised on machines without a GPU; its figures are the
simulator's, never a GPU's, and the report says so.

It reports an SM clock too, so the report's clock-matched figures are
exercised: nominal, except that the bf16 matmuls run where the H200 runs them,
at its power cap, at a clock drawn anew for every command (1410-1545 MHz, as
measured), and take proportionally longer at a lower clock: power-state noise
between two runs that the clock-matched inflation leaves out.
"""

from __future__ import annotations

import time

STARTED = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

# Simulated kernel time per problem (ms): one per report bucket.
BASE_MS = {"matmul_fp32": 12.0, "matmul_fp32_4k": 3.0, "matmul_bf16": 2.0, "softmax": 0.3, "rmsnorm": 0.05, "gelu": 0.03}
BUILD_S = 0.05  # stands in for the compile; sleeping keeps CI's CPUs free
NOMINAL_MHZ = 1980
POWER_CAPPED = {"matmul_bf16": (1410, 1425, 1485, 1500, 1530, 1545)}  # MHz seen on the H200 at its power cap


def sm_clock_mhz(problem: str) -> int:
    """The clock this command's measurement runs at (a fresh draw per command where power-capped)."""
    steps = POWER_CAPPED.get(problem)
    return random.SystemRandom().choice(steps) if steps else NOMINAL_MHZ


def kernel_ms(problem: str, candidate: str) -> float:
    """Distinct, fixed times for a problem's candidates: 0%, 7%, 14%, ... slower than the first."""
    from krex_bench import workload

    names = [c.name for c in workload.BY_NAME[problem].candidates]
    return BASE_MS[problem] * (1 + 0.07 * names.index(candidate))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m krex_bench.sim_candidate")
    p.add_argument("problem")
    p.add_argument("candidate")
    p.add_argument("--repeats", type=int, default=0)
    args = p.parse_args(argv)

    from krex_bench import workload
    from krex_bench.candidate import PLACEMENTS, placement_shares
    from krex_runtime.client import region
    from krex_runtime.sim.simcuda import SimCuda

    imported = time.time()
    cand = workload.candidate(args.problem, args.candidate)
    repeats = max(PLACEMENTS, min(args.repeats or workload.BY_NAME[args.problem].repeats, 20))
    cuda = SimCuda()
    clock = sm_clock_mhz(cand.problem)
    reference_mhz = POWER_CAPPED[cand.problem][0] if cand.problem in POWER_CAPPED else NOMINAL_MHZ
    duration_ns = int(kernel_ms(cand.problem, cand.name) * reference_mhz / clock * 1e6)
    time.sleep(BUILD_S)
    cuda.time_kernel(duration_ns, repeats=1)  # first launch
    compiled = time.time()
    checked = time.time()
    with region() as held:
        entered = time.time()
        # Shared among placements as the GPU command shares them (the
        # simulated device has one memory: they differ only by its noise).
        per_placement = [cuda.time_kernel(duration_ns, repeats=s.stop - s.start)
                         for s in placement_shares(repeats, PLACEMENTS)]
        times = [t for chunk in per_placement for t in chunk]
    timed = time.time()
    cuda.synchronize()
    print(
        json.dumps(
            {
                "problem": cand.problem,
                "candidate": cand.name,
                "rel_error": 0.0,
                "ok": True,
                "median_ms": statistics.median(times),
                "min_ms": min(times),
                "repeats": repeats,
                "placements": PLACEMENTS,
                "placement_medians_ms": [statistics.median(chunk) for chunk in per_placement],
                "warm_runs": 1,
                "sm_clock_mhz": clock,
                "region_flags": list(held.flags),
                "phases_s": {
                    "import": imported - STARTED,
                    "build_compile": compiled - imported,
                    "check": checked - compiled,
                    "region_wait": entered - checked,
                    "timing": timed - entered,
                },
                "started": STARTED,
                "ended": time.time(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
