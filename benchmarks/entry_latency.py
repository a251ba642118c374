"""Region entry latency with 15 tenants in start-up and 15 busy ones, per gate
backend and per `regions.entry_waits_for` (what quiesce waits for).

Starts a real runtime (policy krex) per configuration on GPU 0 with:
  - 15 tenants in start-up, kept at 15 (each ending one is replaced): "imports",
    context creation, module loads, a few kernels, exit. On simulated GPUs the
    latencies are the simulator's (KREX_SIM_CTX_CREATE_MS, KREX_SIM_MODULE_LOAD_MS),
    drawn per tenant; with --gpu each is a Python process that imports torch
    (or cupy) and runs its first kernels;
  - 15 busy tenants queueing kernels (simulated, or torch bf16 matmuls);
  - a probe that enters and leaves --regions regions (one small kernel inside).
Prints one table from the trace's region_granted events: entry (close to
grant) p50/p99, its quiesce and drain parts, how often a start-up call was
inside at the close and how often entry let one finish outside (deferred).

  simulator:  python benchmarks/entry_latency.py
  real GPU:   python benchmarks/entry_latency.py --gpu
"""

from __future__ import annotations

import json
import platform
import random
import threading
from pathlib import Path

import scaffold

from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

# A start-up on a real GPU: import, context, first kernels (cuBLAS and its module loads).
GPU_STARTUP = (
    "try:\n"
    "    import torch\n"
    "    x = torch.randn(1024, 1024, device='cuda')\n"
    "    (x @ x).sum().item()\n"
    "except ImportError:\n"
    "    import cupy\n"
    "    x = cupy.random.rand(1024, 1024)\n"
    "    float((x @ x).sum())\n"
)


def startup_argv(gpu: bool, rng: random.Random) -> list[str]:
    if gpu:
        return [scaffold.PY, "-c", GPU_STARTUP]
    # Figures of the H200 node (docs/DESIGN.md): import ~3 s, a context 0.2-2 s under
    # contention, module loads tens to hundreds of ms.
    return [scaffold.PY, str(scaffold.TENANTS / "startup.py"), "--import-ms", str(rng.uniform(500, 3000)),
            "--ctx-ms", str(int(rng.uniform(200, 2000))), "--module-ms", str(int(rng.uniform(20, 400))),
            "--kernels", "4", "--kernel-us", "2000"]


class StartupKeeper:
    """Keeps `n` start-up tenants submitted: each one that ends is replaced."""

    def __init__(self, rt: Runtime, n: int, gpu: bool) -> None:
        self.rt, self.n, self.gpu, self.rng = rt, n, gpu, random.Random(7)
        self.stop = threading.Event()
        self.started = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        active: set[str] = set()
        with self.rt.client(timeout_s=30) as c:
            while not self.stop.is_set():
                states = {cmd["id"]: cmd["state"] for cmd in c.call("snapshot")["state"]["commands"]}
                active = {i for i in active if states.get(i) in ("queued", "running")}
                while len(active) < self.n:
                    active.add(c.call("submit", {"argv": startup_argv(self.gpu, self.rng), "gpu": 0})["id"])
                    self.started += 1
                self.stop.wait(0.2)
            for i in active:
                c.call("cancel", {"id": i})


def measure(root: Path, gpu: bool, backend: str, waits_for: str, startups: int, busy: int, regions: int) -> dict:
    rt = Runtime(
        root / f"{backend}-{waits_for}", sim=0 if gpu else 1, policy="krex", slots=startups + busy + 1,
        extra_config=f'[regions]\ngate_backend = "{backend}"\nentry_waits_for = "{waits_for}"\n',
    ).start()
    keeper = None
    with scaffold.stopped_after(rt, not gpu):
        try:
            busy_ids = scaffold.start_busy(rt, busy, gpu)
            keeper = StartupKeeper(rt, startups, gpu)
            wait_until(lambda: keeper.started >= startups, 120, "start-up tenants", interval_s=0.5)
            client_side = scaffold.probe_regions(rt, regions, gpu, 1800, "--pause-ms", "50")
            keeper.stop.set()
            keeper.thread.join(60)
            scaffold.cancel(rt, busy_ids)
        finally:
            if keeper is not None:
                keeper.stop.set()
    granted = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_granted" and e["kind"] == "region"]
    ms = lambda key: [e.get(key, 0.0) * 1e3 for e in granted]  # noqa: E731
    host_inside = sum(1 for e in granted if {"context", "module"} & set(e.get("inside_at_close", {})))
    return {
        "backend": backend, "waits_for": waits_for, "n": len(granted),
        "enter_p50": scaffold.rank_quantile(ms("enter_s"), 0.5), "enter_p99": scaffold.rank_quantile(ms("enter_s"), 0.99),
        "quiesce_p50": scaffold.rank_quantile(ms("quiesce_s"), 0.5), "quiesce_p99": scaffold.rank_quantile(ms("quiesce_s"), 0.99),
        "drain_p50": scaffold.rank_quantile(ms("drain_s"), 0.5), "drain_p99": scaffold.rank_quantile(ms("drain_s"), 0.99), "freeze_p50": scaffold.rank_quantile(ms("freeze_s"), 0.5),
        "client_p50": scaffold.rank_quantile(client_side["enter_ms"], 0.5), "client_p99": scaffold.rank_quantile(client_side["enter_ms"], 0.99),
        "host_inside": host_inside, "deferred": sum(1 for e in granted if e.get("deferred")),
        "by_class": by_class(granted),
    }


def by_class(granted: list[dict]) -> dict[str, tuple[int, float]]:
    """Call class -> (regions whose close found a thread inside one, their quiesce p50 in ms):
    which calls made quiesce long."""
    classes: dict[str, list[float]] = {}
    for e in granted:
        for klass in e.get("inside_at_close", {}):
            classes.setdefault(klass, []).append(e.get("quiesce_s", 0.0) * 1e3)
    return {k: (len(v), scaffold.rank_quantile(v, 0.5)) for k, v in sorted(classes.items(), key=lambda kv: -len(kv[1]))}


def main() -> None:
    p = scaffold.latency_arguments(__doc__, regions=100)
    p.add_argument("--gpu", action="store_true", help="a real GPU 0: torch (or cupy) tenants")
    p.add_argument("--waits-for", default="all,perturbing", help="regions.entry_waits_for values to compare")
    p.add_argument("--startups", type=int, default=15)
    p.add_argument("--busy", type=int, default=15)
    args = p.parse_args()
    rows = scaffold.rows_per_backend(args.backends, args.waits_for.split(","), lambda folder, backend, waits_for: measure(
        folder, args.gpu, backend, waits_for, args.startups, args.busy, args.regions))
    where = "real GPU 0" if args.gpu else "SIMULATED GPU (simulator figures, not GPU figures)"
    print(f"# region entry latency — {platform.node()}, {where}; {args.startups} tenants in start-up, "
          f"{args.busy} busy, {args.regions} regions each; ms")
    print(f"{'backend':<12} {'waits for':<11} {'entry p50':>9} {'p99':>8} {'quiesce p50':>11} {'p99':>8} "
          f"{'drain p50':>9} {'p99':>8} {'freeze p50':>10} {'tenant p50':>10} {'p99':>8} {'host call in':>12} {'deferred':>8}")
    for r in rows:
        print(f"{r['backend']:<12} {r['waits_for']:<11} {r['enter_p50']:>9.2f} {r['enter_p99']:>8.2f} "
              f"{r['quiesce_p50']:>11.2f} {r['quiesce_p99']:>8.2f} {r['drain_p50']:>9.2f} {r['drain_p99']:>8.2f} {r['freeze_p50']:>10.2f} "
              f"{r['client_p50']:>10.2f} {r['client_p99']:>8.2f} {r['host_inside']:>8}/{r['n']:<3} {r['deferred']:>8}")
    print("entry: close to grant (runtime side); tenant: the probe's own enter time (queueing included); "
          "host call in: regions whose close found a start-up call (context, module) in progress")
    print("inside at the close, per call class: regions (their quiesce p50, ms)")
    for r in rows:
        classes = ", ".join(f"{k} {n} ({p50:.1f})" for k, (n, p50) in r["by_class"].items()) or "none"
        print(f"  {r['backend']:<12} {r['waits_for']:<11} {classes}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
