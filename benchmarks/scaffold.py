"""What the benchmark scripts that start a runtime share: their common
arguments, busy tenants and the region probe, a command's result checked,
the commands-a-second run, and a runtime stopped with its simulated device.

Not a benchmark itself: imported by the scripts next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from krex_runtime.api import Client
from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime, wait_until

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TENANTS = REPO / "tests" / "tenants"
PY = sys.executable


def runtime_arguments(doc: str, sim: str, n: str) -> argparse.ArgumentParser:
    """A parser with the arguments of every benchmark of a runtime's modes:
    --sim (help `sim`), --gpus and --n (help `n`); the script adds its own."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sim", action="store_true", help=sim)
    p.add_argument("--gpus", default="0", help="GPU indices to serve, comma-separated (default: 0)")
    p.add_argument("--n", type=int, default=64, help=n)
    return p


def visible_gpus(args: argparse.Namespace) -> tuple[int, ...]:
    """The GPUs --gpus names; none on a simulated node (it has one of its own)."""
    return () if args.sim else tuple(int(g) for g in args.gpus.split(","))


@contextmanager
def stopped_after(rt: Runtime, sim: bool) -> Iterator[Runtime]:
    """`rt`, stopped when the block ends; a simulated node's device file goes with it."""
    try:
        yield rt
    finally:
        rt.stop()
        if sim:
            remove_device(rt.device)


def finished(result: dict[str, Any], mode: str) -> dict[str, Any]:
    """A `wait` reply of a command that finished with status 0; the benchmark
    stops (with the command's last stderr) on any other."""
    if result["state"] != "finished" or result["exit_code"] != 0:
        err = Path(result["stderr_path"]).read_text()[-2000:]
        raise SystemExit(f"{mode} command failed: {result['state']} {result['exit_code']} {result['reason']}\n{err}")
    return result


def commands_per_s(c: Client, body: dict[str, Any], n: int) -> float:
    """`n` submits of `body` at once, then each one's result: commands a second."""
    t0 = time.perf_counter()
    ids = [c.call("submit", body)["id"] for _ in range(n)]
    for command_id in ids:
        finished(c.call("wait", {"id": command_id, "attach": False}, timeout=1800), body["mode"])
    return n / (time.perf_counter() - t0)


def latency_arguments(doc: str, regions: int) -> argparse.ArgumentParser:
    """A parser with the arguments of the region latency benchmarks: --backends,
    --regions (default `regions`) and --json; the script adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--backends", default="preload,driver-lock")
    p.add_argument("--regions", type=int, default=regions)
    p.add_argument("--json", metavar="FILE", help="also write the rows here")
    return p


def rows_per_backend(backends: str, values: list[Any], measure: Callable[[Path, str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """measure(folder, backend, value) for every gate backend (comma-separated)
    and value, in one temporary folder; each row said on stderr when done."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends.split(","):
            for value in values:
                rows.append(measure(Path(tmp), backend, value))
                print(f"  done: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    return rows


def rank_quantile(values: list[float], p: float) -> float:
    """The value at rank p of `values` (nan for none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def busy_argv(gpu: bool) -> list[str]:
    """A tenant that keeps the GPU busy: torch bf16 matmuls, or simulated kernels."""
    return [PY, str(TENANTS / "torch_busy.py"), "4096", "4"] if gpu else [PY, str(TENANTS / "busy.py"), "2000", "4"]


def start_busy(rt: Runtime, count: int, gpu: bool) -> list[str]:
    """`count` busy tenants on GPU 0, once each says it is ready: their ids."""
    with rt.client(timeout_s=30) as c:
        ids = [str(c.call("submit", {"argv": busy_argv(gpu), "gpu": 0})["id"]) for _ in range(count)]
    outputs = [rt.run_dir / "output" / f"{b}.stdout" for b in ids]
    wait_until(lambda: all(p.exists() and "ready" in p.read_text() for p in outputs), 300, "busy tenants", interval_s=0.5)
    return ids


def probe_regions(rt: Runtime, regions: int, gpu: bool, timeout: float, *more: str) -> dict[str, Any]:
    """What benchmarks/tenants/latency_probe.py measured of `regions` regions
    on GPU 0 (its enter and exit times, ms), `more` added to its arguments."""
    probe = rt.krex(
        "run", "--gpu", "0", "--", PY, str(HERE / "tenants" / "latency_probe.py"),
        "--regions", str(regions), "--device", "torch" if gpu else "sim", *more, timeout=timeout,
    )
    if probe.returncode != 0:
        raise RuntimeError(f"probe failed: {probe.stderr}")
    return dict(json.loads(probe.stdout.strip().splitlines()[-1]))


def cancel(rt: Runtime, ids: list[str]) -> None:
    with rt.client() as c:
        for command_id in ids:
            c.call("cancel", {"id": command_id})
