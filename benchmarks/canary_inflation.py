"""The canary's inflation estimate under `krex` and `ungated`, side by side, at
concurrency 16 (15 busy tenants and the canary on GPU 0).

  real GPU:   python benchmarks/canary_inflation.py            (PyTorch tenants)
  simulator:  python benchmarks/canary_inflation.py --sim

Prints one table, and the GPU's metrics as the runtime published them.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime, wait_until

TENANTS = Path(__file__).resolve().parent.parent / "tests" / "tenants"
PY = sys.executable


def run(root: Path, policy: str, sim: bool, samples: int, period: float, target_ms: float) -> dict:
    rt = Runtime(
        root / policy,
        sim=1 if sim else 0,
        policy=policy,
        slots=16,
        canary=True,
        canary_period_s=period,
        canary_target_ms=target_ms,
    ).start()
    try:
        busy = [PY, str(TENANTS / ("busy.py" if sim else "torch_busy.py")), "2000" if sim else "4096", "4"]
        with rt.client(timeout_s=30) as c:
            ids = [c.call("submit", {"argv": busy, "gpu": 0})["id"] for _ in range(15)]
        outputs = [rt.run_dir / "output" / f"{i}.stdout" for i in ids]
        wait_until(lambda: all(p.exists() and "ready" in p.read_text() for p in outputs), 300, "busy tenants", interval_s=0.5)

        def canary() -> dict:
            with rt.client() as c:
                return c.call("snapshot")["state"]["gpus"][0]

        start = canary()["canary"].get("samples", 0)
        wait_until(lambda: canary()["canary"].get("samples", 0) >= start + samples, 600, "canary samples", interval_s=1.0)
        gpu = canary()
    finally:
        rt.stop()
        if sim:
            remove_device(rt.device)
    return {"policy": policy, "canary": gpu["canary"], "telemetry": gpu["telemetry"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sim", action="store_true")
    p.add_argument("--samples", type=int, default=20, help="canary samples (inside + outside) per policy")
    p.add_argument("--target-ms", type=float, default=1.0, help="canary kernel length (telemetry.canary_target_ms)")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(Path(tmp), policy, args.sim, args.samples, 0.5, args.target_ms) for policy in ("krex", "ungated")]
    where = "simulated GPU" if args.sim else "GPU 0"
    c0 = rows[0]["canary"]
    print(f"# canary inflation at concurrency 16 — {platform.node()}, {where}; target {args.target_ms:g} ms; baseline compute "
          f"{c0['baseline_compute_ms']:.3f} ms, memory {c0['baseline_memory_ms']:.3f} ms")
    print(f"{'policy':<9} {'inside p50':>11} {'inside p95':>11} {'outside p50':>12} {'outside p95':>12} "
          f"{'contention':>11} {'samples':>8} {'flagged':>8}")
    for r in rows:
        c = r["canary"]
        print(f"{r['policy']:<9} {c['inside_p50']:>11.2%} {c['inside_p95']:>11.2%} {c['outside_p50']:>12.2%} "
              f"{c['outside_p95']:>12.2%} {c['contention']:>11.2f} {c['samples']:>8} {c['flagged']:>8}")
    print("metrics (last sample, krex run):", json.dumps(rows[0]["telemetry"]))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
