"""Forwarded mode against process mode for a native CUDA program: start-up,
throughput and timing fidelity, in one run.

Builds tests/gpu/forward_gemm.cu with nvcc (a driver-API GEMM timed with CUDA
events, no CUDA runtime), starts its own krex-runtime (policy krex) on this
node's GPUs with `--servers` context servers per GPU, and measures for
process and forwarded mode:
  - start-to-first-kernel, alone: from the client's submit to the end of the
    command's first kernel, as the command prints it (same clock), over
    --samples commands run one after another;
  - throughput: --n commands submitted at once, commands per second;
  - timing fidelity: --fidelity commands, each timing the GEMM inside a region
    --timings times single-shot (one kernel between two events) and as medians
    of ten; the median of each per mode, and the shift forwarded - process,
    under regions.protection "gpu-only" and "gpu+cpu" (a runtime each).

Prints a table and one JSON document (--json FILE writes it too).

With --cudart the program is tests/gpu/forward_gemm_cudart.cu instead: the same
GEMM written against the CUDA runtime (cudaMalloc, kernel<<<>>>, cudaEvent
timing), built with `nvcc -cudart shared`. In process mode it loads the
toolkit's libcudart, in forwarded mode forwarded mode's libcudart
(native/build/forward/), which runs its runtime calls over the forwarded
driver calls.

With --sim it runs on one simulated GPU with native/build/tests/linked_tenant
(with --cudart: cudart_tenant) instead (no nvcc, no GPU): only submit-to-result
and throughput, and the figures are this machine's, not a GPU's.

Usage: PYTHONPATH=. python3 benchmarks/forward_gemm.py [--gpus 0] [--n 64] [--servers 16] [--cudart] [--sim]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scaffold import REPO, commands_per_s, finished, runtime_arguments, stopped_after, visible_gpus

from krex_runtime.api import Client
from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime

MODES = ("process", "forwarded")


def parse_args() -> argparse.Namespace:
    p = runtime_arguments(__doc__, sim="one simulated GPU and a C test tenant (no nvcc, no GPU)",
                          n="commands submitted at once in the throughput run")
    p.add_argument("--servers", type=int, default=16, help="dispatcher slots and context servers per GPU")
    p.add_argument("--samples", type=int, default=8, help="sequential commands for start-to-first-kernel")
    p.add_argument("--size", type=int, default=1024, help="GEMM size N (N x N, fp32)")
    p.add_argument("--fidelity", type=int, default=5, help="commands per mode in the fidelity run")
    p.add_argument("--timings", type=int, default=20, help="single-shot timings (and medians of ten) per command")
    p.add_argument("--arch", default="sm_90", help="nvcc -arch of the kernel")
    p.add_argument("--cudart", action="store_true",
                   help="the CUDA runtime program (tests/gpu/forward_gemm_cudart.cu, nvcc -cudart shared)")
    p.add_argument("--json", type=Path, help="also write the results here")
    return p.parse_args()


def build(out: Path, arch: str) -> tuple[Path, Path]:
    """The kernel's cubin and the program, from tests/gpu/forward_gemm.cu."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    source = REPO / "tests" / "gpu" / "forward_gemm.cu"
    cubin, program = out / "forward_gemm.cubin", out / "forward_gemm"
    native = native_build.native_dir()
    subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-DFORWARD_GEMM_KERNEL", f"-I{native_build.header_dir()}",
                    "-o", str(cubin), str(source)], check=True)
    # The program is host code only: built by the host compiler, so nothing of the
    # CUDA runtime (nvcc's fatbinary registration) is linked in.
    cuda = Path(nvcc).resolve().parent.parent
    subprocess.run(["c++", "-O2", "-x", "c++", "-o", str(program), str(source), f"-I{cuda / 'include'}",
                    f"-I{native_build.header_dir()}", f"-L{native}", "-l:libkrex.so", f"-Wl,-rpath,{native}",
                    f"-L{cuda / 'lib64' / 'stubs'}", "-lcuda"], check=True)
    return cubin, program


def build_cudart(out: Path, arch: str) -> Path:
    """The CUDA runtime program, from tests/gpu/forward_gemm_cudart.cu, linked with
    the shared CUDA runtime (its run path names the toolkit's, which forwarded
    mode's library path comes before)."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    source = REPO / "tests" / "gpu" / "forward_gemm_cudart.cu"
    program = out / "forward_gemm_cudart"
    native = native_build.native_dir()
    cuda = Path(nvcc).resolve().parent.parent
    subprocess.run([nvcc, "-cudart", "shared", f"-arch={arch}", "-O2", f"-I{native_build.header_dir()}",
                    "-o", str(program), str(source), f"-L{native}", "-l:libkrex.so",
                    "-Xlinker", f"-rpath,{native}", "-Xlinker", f"-rpath,{cuda / 'lib64'}"], check=True)
    return program


def start_runtime(root: Path, args: argparse.Namespace, protection: str) -> Runtime:
    return Runtime(
        root,
        sim=1 if args.sim else 0,
        policy="krex",
        slots=args.servers,
        visible=visible_gpus(args),
        extra_config=(
            f'[regions]\nprotection = "{protection}"\n'
            f"[forward]\nservers_per_gpu = {args.servers}\nmax_commands = 100000\n"
        ),
    ).start()


def wait_servers(rt: Runtime, count: int, timeout_s: float = 300) -> None:
    """Until the runtime has `count` context servers (krex-ctxd children)."""
    import psutil

    assert rt.proc is not None
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if sum(p.name() == "krex-ctxd" for p in psutil.Process(rt.proc.pid).children()) >= count:
            time.sleep(1.0)  # each says ready right after its context exists
            return
        time.sleep(0.2)
    raise SystemExit("the context servers were not ready in time")


def body(argv: list[str], mode: str) -> dict[str, Any]:
    return {"argv": argv, "mode": mode, "cwd": "/", "env": {}}


def submit(c: Client, argv: list[str], mode: str) -> str:
    return str(c.call("submit", body(argv, mode))["id"])


def result_of(c: Client, command_id: str, mode: str) -> dict[str, Any]:
    return finished(c.call("wait", {"id": command_id, "attach": False}, timeout=1800), mode)


def stamps(result: dict[str, Any]) -> dict[str, Any]:
    line = Path(result["stdout_path"]).read_text().strip().splitlines()[-1]
    return dict(json.loads(line))


def alone(c: Client, argv: list[str], mode: str, samples: int, sim: bool) -> dict[str, float]:
    firsts, totals = [], []
    for _ in range(samples):
        submitted = time.time()
        result = result_of(c, submit(c, argv, mode), mode)
        totals.append(time.time() - submitted)
        if not sim:
            firsts.append(stamps(result)["first_kernel"] - submitted)
    out = {"submit_to_result_s": statistics.median(totals)}
    if firsts:
        out["start_to_first_kernel_s"] = statistics.median(firsts)
    return out


def fidelity(c: Client, argv: list[str], mode: str, commands: int) -> dict[str, float]:
    single, median10 = [], []
    for _ in range(commands):
        s = stamps(result_of(c, submit(c, argv, mode), mode))
        single += s["single_ms"]
        median10 += s["median10_ms"]
    return {"single_shot_median_us": statistics.median(single) * 1000,
            "median_of_ten_median_us": statistics.median(median10) * 1000}


def main() -> int:
    args = parse_args()
    root = Path(tempfile.mkdtemp(prefix="krex-forward-bench-"))
    results: dict[str, Any] = {"sim": args.sim, "cudart": args.cudart, "servers": args.servers, "n": args.n,
                               "size": args.size}
    if args.sim:
        # The CUDA runtime variant: the C tenant on forwarded mode's libcudart.
        name, target = ("cudart_tenant", "cudart-tests") if args.cudart else ("linked_tenant", "intercept-tests")
        tool = native_build.native_dir() / "tests" / name
        if not tool.exists():
            subprocess.run(["make", "-s", "-C", str(REPO / "native"), "all", target], check=True)
        quick = [str(tool), "regions", "1", "100", "1", "0"] if args.cudart else [str(tool), "1", "1", "100000", "1"]
        timed: list[str] = []
        protections = ["gpu-only"]
    elif args.cudart:
        program = build_cudart(root, args.arch)
        quick = [str(program), str(args.size), "1"]
        timed = [str(program), str(args.size), str(args.timings), "region"]
        protections = ["gpu-only", "gpu+cpu"]
    else:
        cubin, program = build(root, args.arch)
        quick = [str(program), str(cubin), str(args.size), "1"]
        timed = [str(program), str(cubin), str(args.size), str(args.timings), "region"]
        protections = ["gpu-only", "gpu+cpu"]
    for index, protection in enumerate(protections):
        with stopped_after(start_runtime(root / f"node-{index}", args, protection), args.sim) as rt:
            wait_servers(rt, args.servers * (1 if args.sim else len(args.gpus.split(","))))
            with rt.client(timeout_s=60) as c:
                for mode in MODES:
                    entry = results.setdefault(mode, {})
                    if index == 0:
                        entry.update(alone(c, quick, mode, args.samples, args.sim))
                        entry["commands_per_s"] = commands_per_s(c, body(quick, mode), args.n)
                    if timed:
                        entry[protection] = fidelity(c, timed, mode, args.fidelity)
    for protection in protections if timed else []:
        for key in ("single_shot_median_us", "median_of_ten_median_us"):
            shift = results["forwarded"][protection][key] - results["process"][protection][key]
            results.setdefault("shift_us", {}).setdefault(protection, {})[key] = shift
    label = "SIMULATED GPU (this machine's figures, not a GPU's)" if args.sim else f"GPUs {args.gpus}"
    program = ("CUDA runtime " + ("C tenant" if args.sim else "program (nvcc -cudart shared)")) if args.cudart \
        else "driver-API program"
    print(f"forwarded vs process mode, {label}, {program}; {args.servers} servers per GPU, {args.n} commands at once")
    for mode in MODES:
        print(f"  {mode:10s} " + ", ".join(f"{k} {v:.4g}" for k, v in results[mode].items() if isinstance(v, float)))
        for protection in protections if timed else []:
            print(f"    {protection}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[mode][protection].items()))
    if "shift_us" in results:
        print("  forwarding shift of the median (us): " + json.dumps(results["shift_us"]))
    print(json.dumps(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
