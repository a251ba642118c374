"""Start-up cost of a GPU command: process, forked and pooled mode, in one run.

Starts its own krex-runtime (policy ungated) on this node's GPUs, with a
context pool and a zygote preloading torch, and measures for each mode:
  - start-to-first-kernel latency: from the client's submit to the end of the
    command's first kernel (one small matmul + synchronize), as printed by the
    command itself (same machine, same wall clock), over --samples commands
    run one after another;
  - the command's own import and first-kernel times, and submit-to-result;
  - throughput of --n short commands submitted at once.

Prints a table. Needs the runtime's dependencies (pyzmq, psutil, nvidia-ml-py; not
textual); real GPUs also need torch and the native library (make -C native).
With --sim it runs on one simulated GPU with a simcuda command instead of
torch: the figures are then this machine's, not a GPU's.

Usage: PYTHONPATH=. python3 benchmarks/pool_startup.py [--gpus 0] [--n 64] [--samples 8] [--sim]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scaffold import commands_per_s, finished, runtime_arguments, stopped_after, visible_gpus

from krex_runtime.api import Client
from krex_runtime.testing.local_runtime import Runtime

TORCH_COMMAND = """\
import json, time
t0 = time.time()
import torch
t1 = time.time()
a = torch.randn(256, 256, device="cuda")
b = a @ a
torch.cuda.synchronize()
t2 = time.time()
print(json.dumps({"start": t0, "imported": t1, "first_kernel": t2}))
"""

SIM_COMMAND = """\
import json, time
t0 = time.time()
from krex_runtime.sim.simcuda import SimCuda
t1 = time.time()
cuda = SimCuda()
cuda.launch(100_000)
cuda.synchronize()
t2 = time.time()
print(json.dumps({"start": t0, "imported": t1, "first_kernel": t2}))
"""


def parse_args() -> argparse.Namespace:
    p = runtime_arguments(__doc__, sim="one simulated GPU and a simcuda command (no torch)",
                          n="commands in the throughput run")
    p.add_argument("--samples", type=int, default=8, help="sequential commands for the latency figures")
    p.add_argument("--slots", type=int, default=4, help="dispatcher slots and context processes per GPU")
    p.add_argument("--no-preload", action="store_true", help="run tenants without the interception library")
    p.add_argument("--keep", action="store_true", help="keep the run folder (trace, output) and print it")
    return p.parse_args()


def start_runtime(root: Path, args: argparse.Namespace) -> Runtime:
    preload = ["krex_runtime.sim.simcuda"] if args.sim else ["torch"]
    return Runtime(
        root,
        sim=1 if args.sim else 0,
        policy="ungated",
        slots=args.slots,
        visible=visible_gpus(args),
        preload=not args.no_preload,
        extra_config=(
            f"[pool]\nsize_per_gpu = {args.slots}\npreload = {json.dumps(preload)}\nmax_commands = 1000\nzygote = true\n"
        ),
    ).start()


def body(script: Path, mode: str) -> dict[str, Any]:
    return {"argv": [sys.executable, str(script)], "mode": mode, "cwd": str(script.parent), "env": dict(os.environ)}


def one_command(c: Client, script: Path, mode: str) -> dict[str, float]:
    submitted = time.time()
    command_id = c.call("submit", body(script, mode))["id"]
    result = finished(c.call("wait", {"id": command_id, "attach": False}, timeout=600), mode)
    done = time.time()
    stamps = json.loads(Path(result["stdout_path"]).read_text().strip().splitlines()[-1])
    return {
        "first_kernel_s": stamps["first_kernel"] - submitted,
        "startup_s": stamps["start"] - submitted,
        "import_s": stamps["imported"] - stamps["start"],
        "kernel_s": stamps["first_kernel"] - stamps["imported"],
        "total_s": done - submitted,
    }


def wait_zygotes(c: Client, timeout_s: float = 600) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        zygotes = [g["zygote"] for g in c.call("snapshot")["state"]["gpus"]]
        if any(z.get("state") == "failed" for z in zygotes):
            raise SystemExit(f"forked mode unavailable: {[z.get('reason') for z in zygotes]}")
        if all(z.get("state") == "ready" for z in zygotes):
            return
        time.sleep(0.2)
    raise SystemExit("the zygotes were not ready in time")


def main() -> int:
    args = parse_args()
    root = Path(tempfile.mkdtemp(prefix="krex-pool-bench-"))
    script = root / "command.py"
    script.write_text(SIM_COMMAND if args.sim else TORCH_COMMAND)
    with stopped_after(start_runtime(root / "node", args), args.sim) as rt:
        gpus = 1 if args.sim else len(args.gpus.split(","))
        warm_s = rt.wait_pool_warm(args.slots)
        rows = []
        with rt.client(timeout_s=600) as c:
            wait_zygotes(c)
            for mode in ("process", "forked", "pooled"):
                one_command(c, script, mode)  # warm file caches and the pool's first use
                samples = [one_command(c, script, mode) for _ in range(args.samples)]
                rate = commands_per_s(c, body(script, mode), args.n)
                med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
                best = min(s["first_kernel_s"] for s in samples)
                rows.append((mode, med, best, rate))
    kind = "simulated GPU, simcuda command" if args.sim else f"{gpus} GPU(s), torch command"
    print(f"pool start-up benchmark: {kind}; {platform.node()}, Python {platform.python_version()}")
    print(f"pool of {args.slots} per GPU warm after {warm_s:.2f} s; latency: median of {args.samples}, one at a time")
    print()
    print(f"{'mode':<8} {'first kernel':>12} {'best':>8} {'to start':>9} {'import':>8} {'kernel':>8} {'result':>8} {f'{args.n} cmds/s':>10}")
    for mode, med, best, rate in rows:
        print(
            f"{mode:<8} {med['first_kernel_s']:>11.3f}s {best:>7.3f}s {med['startup_s']:>8.3f}s {med['import_s']:>7.3f}s "
            f"{med['kernel_s']:>7.3f}s {med['total_s']:>7.3f}s {rate:>10.1f}"
        )
    print()
    print("first kernel: submit -> end of the first kernel; to start: submit -> the command's first line;")
    print("import: its import of the framework (near zero when forked or pooled: preloaded); result: submit -> result received.")
    if args.keep:
        print(f"run folder kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
