"""Pinned host-to-device copies, forwarded against process mode: the copy
asked for (a cuMemAllocHost buffer, from the command's pinned arena) and a
staged one (the program's own memory, registered with cuMemHostRegister).

Builds tests/gpu/forward_pinned_copy.c with the host compiler against the
toolkit's cuda.h and libcuda, starts its own krex-runtime (policy krex) on
GPU --gpus with one context server, runs the program --commands times per
mode and prints a table of the medians of its event-timed copies (ms, GB/s).
With --sim it runs on one simulated GPU (the simulator's libcuda; its copies
cost bytes over KREX_SIM_COPY_MBPS, pageable ones twice that): the figures
are the model's, not a GPU's.

Usage: PYTHONPATH=. python3 benchmarks/forward_pinned.py [--gpus 0] [--mib 64] [--copies 20] [--commands 3] [--sim]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from scaffold import REPO, runtime_arguments, stopped_after, visible_gpus

from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime

MODES = ("process", "forwarded")
KINDS = ("pinned", "registered")


def parse_args() -> argparse.Namespace:
    p = runtime_arguments(__doc__, sim="one simulated GPU (the simulator's copy model)", n="unused")
    p.add_argument("--mib", type=int, default=64, help="bytes per copy, in MiB")
    p.add_argument("--copies", type=int, default=20, help="event-timed copies per kind and command")
    p.add_argument("--commands", type=int, default=3, help="commands per mode")
    return p.parse_args()


def build(out: Path, sim: bool) -> Path:
    program = out / "forward_pinned_copy"
    source = REPO / "tests" / "gpu" / "forward_pinned_copy.c"
    if sim:
        sim_lib = native_build.native_dir() / "sim"
        include = [p for p in (Path("/usr/local/cuda/include"), *REPO.glob(".venv/lib/python3*/site-packages/nvidia/"
                                                                           "cu13/include")) if (p / "cuda.h").exists()]
        link = [f"-L{sim_lib}", "-l:libcuda.so.1", f"-Wl,-rpath,{sim_lib}"]
    else:
        cuda = Path(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc").resolve().parent.parent
        include, link = [cuda / "include"], [f"-L{cuda / 'lib64' / 'stubs'}", "-lcuda"]
    subprocess.run(["cc", "-O2", f"-I{include[0]}", "-o", str(program), str(source), *link], check=True)
    return program


def wait_server(rt: Runtime, timeout_s: float = 300) -> None:
    import psutil

    assert rt.proc is not None
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if any(p.name() == "krex-ctxd" for p in psutil.Process(rt.proc.pid).children()):
            time.sleep(1.0)
            return
        time.sleep(0.2)
    raise SystemExit("the context server was not ready in time")


def run_mode(rt: Runtime, program: Path, mode: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Per kind, the median of each command's timed copies (ms)."""
    out: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(args.commands):
        done = rt.krex("run", "--mode", mode, "--json", "--", str(program), str(args.mib), str(args.copies))
        result = json.loads(done.stdout)
        if result["state"] != "finished" or not result["stdout"].endswith("intact\n"):
            raise SystemExit(f"{mode} command failed: {result['state']} {result['reason']}\n{result['stderr'][-2000:]}")
        for line in result["stdout"].splitlines():
            words = line.split()
            if len(words) == 3 and words[0] in out:
                out[words[0]].append(float(words[1]))
    return out


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="krex-fwd-pinned-") as tmp:
        program = build(Path(tmp), args.sim)
        rt = Runtime(Path(tmp) / "rt", sim=1 if args.sim else 0, policy="krex", slots=2, visible=visible_gpus(args),
                     extra_config='[forward]\nservers_per_gpu = 1\nmax_commands = 100000\n').start()
        with stopped_after(rt, args.sim):
            wait_server(rt)
            results = {mode: run_mode(rt, program, mode, args) for mode in MODES}
    nbytes = args.mib << 20
    where = "simulated GPU (model figures)" if args.sim else f"GPU {args.gpus}"
    print(f"{args.mib} MiB host-to-device on {where}: median over {args.commands} commands of each one's "
          f"median of {args.copies} event-timed copies")
    print(f"{'memory':<12}{'process ms':>12}{'GB/s':>8}{'forwarded ms':>15}{'GB/s':>8}  forwarded copy")
    for kind in KINDS:
        row = [statistics.median(results[mode][kind]) for mode in MODES]
        rates = [nbytes / (ms * 1e6) if ms > 0 else 0.0 for ms in row]
        what = "the one asked for (pinned arena)" if kind == "pinned" else "staged (registered by the program)"
        print(f"{kind:<12}{row[0]:>12.3f}{rates[0]:>8.2f}{row[1]:>15.3f}{rates[1]:>8.2f}  {what}")
    print(json.dumps({"mib": args.mib, "copies": args.copies, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
