"""Isolation on real torch: can one command change what the next one sees, in pooled and forked mode?

Starts its own krex-runtime on one GPU (policy ungated) with a context pool of
--pool processes and a zygote, both preloading torch (and triton where it is
installed). First it prints the zygote's state: ready, or refused with the
module and what it did (a thread started, CUDA initialised): that is what
`import torch` / `import triton` do on this node. Then for each kind of
change a command makes it, and the next --probes commands on the same GPU
report what they see; each must see what a fresh process sees (a process-mode
command, run first). Prints a table: per change, per mode, `ok` or how many
probes saw it, and for pooled mode whether the context process was retired
and why (`state-changed: ...`) or the state put back.

Needs torch with CUDA and the native library (make -C native); the runtime's
dependencies (pyzmq, psutil, nvidia-ml-py).

Usage: PYTHONPATH=. python3 benchmarks/isolation_probe.py [--gpu 0] [--probes 4] [--pool 1] [--preload torch,triton]
Exit status 0 when nothing leaked.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from krex_runtime.api import Client
from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime

PROBE = """\
import builtins, json, random, torch
import torch.nn.functional as F
seen = {
    "tf32": torch.backends.cuda.matmul.allow_tf32,
    "cudnn_benchmark": torch.backends.cudnn.benchmark,
    "default_dtype": str(torch.get_default_dtype()),
    "matmul_precision": torch.get_float32_matmul_precision(),
    "fp32_precision": getattr(torch.backends.cuda.matmul, "fp32_precision", None),
    "cudnn_tf32": torch.backends.cudnn.allow_tf32,
    "gelu": [F.gelu is torch._C._nn.gelu, F.gelu(torch.tensor([1.0], dtype=torch.float32)).item()],
    "builtins": hasattr(builtins, "krex_probe_polluted"),
    "torch_rand": [torch.rand(1, dtype=torch.float32).item(), torch.rand(1, device="cuda", dtype=torch.float32).item()],
    "random": random.getrandbits(64),
}
print(json.dumps(seen))
"""

# change -> (the command that makes it, the probe key that must not see it)
CHANGES: dict[str, tuple[str, str]] = {
    "torch.backends.cuda.matmul.allow_tf32 = True": ("torch.backends.cuda.matmul.allow_tf32 = True", "tf32"),
    "torch.backends.cudnn.benchmark = True": ("torch.backends.cudnn.benchmark = True", "cudnn_benchmark"),
    "torch.set_default_dtype(torch.float64)": ("torch.set_default_dtype(torch.float64)", "default_dtype"),
    "torch.set_float32_matmul_precision('medium')": ("torch.set_float32_matmul_precision('medium')", "matmul_precision"),
    "torch.backends.cuda.matmul.fp32_precision = 'tf32'": (
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'", "fp32_precision"
    ),
    "torch.backends.cudnn.allow_tf32 = False": ("torch.backends.cudnn.allow_tf32 = False", "cudnn_tf32"),
    "F.gelu monkeypatched": ("import torch.nn.functional as F\nF.gelu = lambda x, approximate='none': x * 0", "gelu"),
    "builtins attribute": ("import builtins\nbuiltins.krex_probe_polluted = True", "builtins"),
    "torch.rand stream (manual_seed + draws)": (
        "torch.manual_seed(123)\ntorch.rand(5)\ntorch.rand(5, device='cuda')", "torch_rand"
    ),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    p.add_argument("--probes", type=int, default=4, help="commands after each change (default 4)")
    p.add_argument("--pool", type=int, default=1, help="context processes (default 1: every probe meets the changer's)")
    p.add_argument("--preload", default="", help="modules to preload (default: torch, and triton where installed)")
    p.add_argument("--sim", action="store_true", help="a simulated GPU (needs a torch stand-in on PYTHONPATH)")
    p.add_argument("--keep", action="store_true", help="keep the run folder and print it")
    return p.parse_args()


def run(c: Client, mode: str, code: str, gpu: int) -> tuple[dict[str, Any], str]:
    body = {"argv": [sys.executable, "-c", code], "mode": mode, "gpu": gpu, "cwd": "/", "env": dict(os.environ),
            "timeout_s": 600}
    result = c.call("wait", {"id": c.call("submit", body)["id"], "attach": False}, timeout=900)
    out = Path(result["stdout_path"]).read_text()
    if result["state"] != "finished" or result["exit_code"] != 0:
        err = Path(result["stderr_path"]).read_text()[-2000:]
        raise SystemExit(f"{mode} command failed: {result['state']} {result['exit_code']} {result['reason']}\n{err}")
    return result, out


def gpu_state(c: Client) -> dict[str, Any]:
    return c.call("snapshot")["state"]["gpus"][0]


def wait_pool(c: Client, size: int, timeout_s: float = 900) -> float:
    """Seconds until the pool is warm; a pool whose processes keep failing to start ends the probe."""
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        pool = gpu_state(c)["pool"]
        if pool.get("idle", 0) >= size:
            return time.time() - t0
        if pool.get("reasons", {}).get("start_failed", 0) >= 3:
            raise SystemExit(f"context processes fail to start: {pool.get('last_replaced', {}).get('reason')}")
        time.sleep(0.5)
    raise SystemExit(f"the context pool was not warm after {timeout_s:.0f} s")


def wait_zygote(c: Client, timeout_s: float = 600) -> dict[str, Any]:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        z = gpu_state(c)["zygote"]
        if z.get("state") in ("ready", "failed"):
            return z
        time.sleep(0.5)
    return gpu_state(c)["zygote"]


def rng_leaks(c: Client, code: str, seen: list[dict[str, Any]], fresh: dict[str, Any]) -> int:
    """Probes whose torch streams are not what a fresh process would draw.

    Two fresh processes tell, per generator (CPU, CUDA), whether a fresh
    process starts it from a fixed seed (both drew the same) or from the OS.
    A fixed-seed stream must equal the fresh one; an OS-seeded stream must
    differ from the stream left by the changing command and from every other
    probe's (no two commands share a stream)."""
    polluted = json.loads(run(c, "process", "import torch\n" + code + "\n" + PROBE, 0)[1])["torch_rand"]
    first, second = fresh["torch_rand"]
    bad = set()
    for j in range(len(first)):
        values = [s["torch_rand"][j] for s in seen]
        if first[j] == second[j]:
            bad |= {i for i, v in enumerate(values) if v != first[j]}
        else:
            bad |= {i for i, v in enumerate(values) if v == polluted[j] or values.count(v) > 1}
    return len(bad)


def probe_mode(c: Client, mode: str, fresh: dict[str, Any], probes: int) -> tuple[dict[str, str], list[int]]:
    cells: dict[str, str] = {}
    randoms: list[int] = []
    for change, (code, key) in CHANGES.items():
        before = dict(gpu_state(c)["pool"].get("reasons", {}))
        run(c, mode, "import torch\n" + code + "\n", 0)
        seen = [json.loads(run(c, mode, PROBE, 0)[1]) for _ in range(probes)]
        randoms += [s["random"] for s in seen]
        if key == "torch_rand":
            leaked = rng_leaks(c, code, seen, fresh)
        else:
            leaked = sum(1 for s in seen if s[key] != fresh[key][0])
        cell = "ok" if not leaked else f"LEAKED ({leaked}/{probes} saw it)"
        if mode == "pooled":
            pool = gpu_state(c)["pool"]
            if pool.get("reasons", {}).get("state-changed", 0) > before.get("state-changed", 0):
                cell += f"; retired: {pool.get('last_replaced', {}).get('reason', '?')}"
            else:
                cell += "; put back"
        cells[change] = cell
    return cells, randoms


def main() -> int:
    args = parse_args()
    preload = [m for m in args.preload.split(",") if m] or (
        ["torch", "triton"] if importlib.util.find_spec("triton") else ["torch"]
    )
    root = Path(tempfile.mkdtemp(prefix="krex-isolation-probe-"))
    pool = (
        f"[pool]\nsize_per_gpu = {args.pool}\npreload = {json.dumps(preload)}\nzygote = true\nmax_commands = 1000\n"
        f'context = "{"auto" if args.sim else "torch"}"\n'
    )
    rt = Runtime(root / "node", sim=1 if args.sim else 0, policy="ungated", slots=max(2, args.pool),
                 visible=() if args.sim else (args.gpu,), extra_config=pool).start()
    ok = True
    try:
        with rt.client(timeout_s=900) as c:
            warm_s = wait_pool(c, args.pool)
            zygote = wait_zygote(c)
            print(f"preload {preload}; pool of {args.pool} warm after {warm_s:.1f} s")
            if zygote.get("state") == "ready":
                print(f"zygote: ready after importing {zygote.get('modules')} in {zygote.get('import_s', 0):.2f} s "
                      "(no thread left running, CUDA not initialised)")
            else:
                print(f"zygote: {zygote.get('state')}: {zygote.get('reason')}")
            # Two fresh processes: what each key is in a fresh process, and
            # which random streams a fresh process draws from the OS.
            fresh_runs = [json.loads(run(c, "process", PROBE, 0)[1]) for _ in range(2)]
            fresh = {k: [r[k] for r in fresh_runs] for k in fresh_runs[0]}
            columns: dict[str, dict[str, str]] = {}
            streams: dict[str, list[int]] = {}
            for mode in ("pooled", "forked"):
                if mode == "forked" and zygote.get("state") != "ready":
                    columns[mode] = {change: "n/a (zygote not ready)" for change in CHANGES}
                    continue
                columns[mode], streams[mode] = probe_mode(c, mode, fresh, args.probes)
    finally:
        rt.stop()
        if args.sim:
            remove_device(rt.device)
    width = max(len(k) for k in CHANGES) + 2
    print()
    print(f"{'change made by one command':<{width}} {'pooled':<72} forked")
    for change in CHANGES:
        pooled, forked = columns["pooled"][change], columns["forked"][change]
        ok = ok and pooled.startswith("ok") and forked.startswith(("ok", "n/a"))
        print(f"{change:<{width}} {pooled:<72} {forked}")
    cells = []
    for mode in ("pooled", "forked"):
        values = streams.get(mode)
        if values is None:
            cells.append("n/a")
            continue
        distinct = len(set(values)) == len(values)
        ok = ok and distinct
        cells.append(f"{'ok' if distinct else 'REPEATED'} (distinct in {len(values)} commands)")
    print(f"{'random.getrandbits: own stream per command':<{width}} {cells[0]:<72} {cells[1]}")
    print()
    print(f"two fresh processes (process mode) saw: {json.dumps(fresh)}")
    print("RESULT:", "no isolation failure" if ok else "ISOLATION FAILURE")
    if args.keep:
        print(f"run folder kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
