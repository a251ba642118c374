"""Which activity of other processes slows a CUDA-event-timed trial on a GPU
held "alone"? A controlled experiment, no runtime.

One holder process times problems of a KernelBench-format suite with the
suite's timer (krex_bench/suite_candidate.py: an L2 flush, an event pair and
a synchronisation per trial) while, phase by phase, other processes do one
thing that none of KREX's gates holds back today, and never launch a kernel:

  none         nothing (the reference: each problem's fastest trial here)
  cpu          a spinning process on every core but the holder's, the holder
               pinned to its own core (as a region's reserved core)
  cpu-shared   the same spinners on every core, the holder's too, unpinned
  membw        host memory copies on every core but the holder's
  ctx-churn    processes that start, create a CUDA context, allocate 1 GiB
               and exit, over and over (a tenant's start and end)
  alloc-churn  processes that allocate and free 512 MiB of device memory in a loop
  pin-churn    processes that pin and unpin 256 MiB of host memory in a loop
  torch-churn  processes that import torch, allocate 1 GiB on the GPU and exit
  nvml-poll    processes asking NVML for the GPU's processes, clocks and power
               every millisecond (what a monitor, or the runtime, asks)

Each phase times every problem `--rounds` times (30 trials each). Per phase
it prints the trials' excess over the problem's fastest `none` trial
(p50/p90/p99/max), the share of trials over 3% slow, and the within-
measurement spread (median/min - 1) at its p90, with the timing thread's
run-queue wait and involuntary switches. Everything per trial goes to
--out as JSON.

Usage: PYTHONPATH=. python3 benchmarks/perturbation_probe.py --suite DIR --problems 76,11,8 [--gpu 0]
       [--phases none,cpu,...] [--rounds 3] [--churners 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

PHASES = ("none", "cpu", "cpu-shared", "membw", "nvml-poll", "ctx-churn", "alloc-churn", "pin-churn", "torch-churn")

# Perturbers: each a tiny program, run as `python3 -c`. The CUDA ones speak to
# the driver through ctypes, so they load no framework and launch nothing.
_DRIVER = """
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0: sys.exit(f"{what}: CUDA error {r}")
ok(cu.cuInit(0), "cuInit")
dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), GPU), "cuDeviceGet")
ctx = ctypes.c_void_p(); ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
ok(cu.cuCtxSetCurrent(ctx), "set current")
ptr = ctypes.c_uint64()
"""
PERTURBERS = {
    "spin": "while True: pass",
    "membw": "import array\nsrc = bytearray(256 << 20)\nwhile True: dst = bytes(src)",
    "ctx-churn": _DRIVER + "ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)), 'alloc')\n",
    "alloc-churn": _DRIVER + (
        "while True:\n"
        "    ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(512 << 20)), 'alloc')\n"
        "    ok(cu.cuMemFree_v2(ptr), 'free')\n"
    ),
    "pin-churn": _DRIVER + (
        "host = ctypes.c_void_p()\n"
        "while True:\n"
        "    ok(cu.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(256 << 20), 0), 'pin')\n"
        "    ok(cu.cuMemFreeHost(host), 'unpin')\n"
    ),
    "torch-churn": "import torch\nx = torch.empty(1 << 28, device='cuda:GPU')\n",
    "nvml-poll": (
        "import time, pynvml as nv\nnv.nvmlInit()\nh = nv.nvmlDeviceGetHandleByIndex(GPU)\n"
        "while True:\n    nv.nvmlDeviceGetComputeRunningProcesses(h); nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)\n"
        "    nv.nvmlDeviceGetPowerUsage(h); nv.nvmlDeviceGetCurrentClocksThrottleReasons(h); time.sleep(0.001)\n"
    ),
}
RESTARTING = {"ctx-churn", "torch-churn"}  # each process does its thing once and exits: a loop restarts it


class Load:
    """The perturbing processes of one phase; stopped and reaped on exit."""

    def __init__(self, phase: str, gpu: int, holder_core: int, churners: int) -> None:
        self.phase, self.gpu, self.holder_core, self.churners = phase, gpu, holder_core, churners
        self.procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, kind: str, cores: set[int] | None) -> None:
        code = PERTURBERS[kind].replace("GPU", str(self.gpu))
        if kind in RESTARTING:  # a shell loop restarts it: a tenant starting and ending, again and again
            cmd = ["sh", "-c", f'while :; do {sys.executable} -c "$0" >/dev/null 2>&1; done', code]
        else:
            cmd = [sys.executable, "-c", code]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        if cores:
            os.sched_setaffinity(p.pid, cores)
        self.procs.append(p)

    def __enter__(self) -> Load:
        every = set(os.sched_getaffinity(0))
        others = every - {self.holder_core}
        if self.phase in ("cpu", "membw"):
            for core in sorted(others):
                self._spawn("spin" if self.phase == "cpu" else "membw", {core})
        elif self.phase == "cpu-shared":
            for _ in every:
                self._spawn("spin", None)
        elif self.phase != "none":
            for _ in range(self.churners):
                self._spawn(self.phase, others)
            time.sleep(2.0)  # past the first start-up of each
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.wait()
        time.sleep(0.5)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", type=Path, required=True)
    ap.add_argument("--problems", required=True, help="comma-separated stems or numbers")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--churners", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("perturbation.json"))
    args = ap.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        if p not in PHASES:
            raise SystemExit(f"--phases: {p!r} is not one of {', '.join(PHASES)}")

    import torch

    from krex_bench import suite
    from krex_bench.suite_candidate import load, time_with_cuda_events, to_cuda

    torch.cuda.set_device(args.gpu)
    files = [Path(c.params["path"]) for c in suite.select(args.suite, args.problems.split(","))]
    holder_core = max(os.sched_getaffinity(0))
    models = []
    with torch.no_grad():
        for f in files:
            torch.manual_seed(42)
            m = load(f)
            model = m.Model(*[to_cuda(v) for v in m.get_init_inputs()]).cuda().eval()
            models.append((f.stem, model, [to_cuda(v) for v in m.get_inputs()]))
    clock = None
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
        clock = lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)  # noqa: E731
    except Exception:
        pass
    data: dict[str, list[dict]] = {}
    for phase in phases:
        pinned = phase != "cpu-shared"
        os.sched_setaffinity(0, {holder_core} if pinned else os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))
        rows = []
        with Load(phase, args.gpu, holder_core, args.churners), torch.no_grad():
            for r in range(args.rounds):
                for name, model, inputs in models:
                    trials: list[list] = []
                    c0 = clock() if clock else None
                    time_with_cuda_events(lambda model=model, inputs=inputs: model(*inputs), 3, args.trials, rows=trials)
                    rows.append({"problem": name, "round": r, "trials": trials, "clock": [c0, clock() if clock else None]})
        data[phase] = rows
        print(f"phase {phase}: {len(rows)} measurements", flush=True)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    args.out.write_text(json.dumps({"problems": [m[0] for m in models], "phases": data}))
    report(data)
    return 0


def report(data: dict[str, list[dict]]) -> None:
    best: dict[str, float] = {}
    for row in data.get("none", []):
        best[row["problem"]] = min(best.get(row["problem"], 1e9), min(t[0] for t in row["trials"]))
    print(f"{'phase':<12} {'trials':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>8} {'>3%':>6} "
          f"{'spread p90':>10} {'runq us p99':>11} {'invol':>6} {'clock min':>9}")
    for phase, rows in data.items():
        excess, slow, spreads, runq, invol, clocks = [], 0, [], [], 0, []
        for row in rows:
            ms = [t[0] for t in row["trials"]]
            ref = best.get(row["problem"]) or min(ms)
            spreads.append(statistics.median(ms) / min(ms) - 1)
            for t in row["trials"]:
                e = t[0] / ref - 1
                excess.append(e)
                slow += e > 0.03
                if t[3] is not None:
                    runq.append(t[3])
                invol += t[4]
            clocks += [c for c in row["clock"] if c]
        print(f"{phase:<12} {len(excess):>6} {pct(excess, .5):>+7.1%} {pct(excess, .9):>+7.1%} {pct(excess, .99):>+7.1%} "
              f"{max(excess, default=float('nan')):>+8.1%} {slow / max(1, len(excess)):>6.1%} {pct(spreads, .9):>+10.1%} "
              f"{pct(runq, .99):>11.0f} {invol:>6} {min(clocks, default=0):>9}")


if __name__ == "__main__":
    sys.exit(main())
