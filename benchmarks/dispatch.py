"""Control-plane cost: submit round trip and dispatcher throughput for trivial commands.

Starts a real runtime on simulated GPUs and measures, in one run:
  - `hello` round trip (socket + protocol only),
  - `submit` round trip (admission, no waiting for the command),
  - submit-to-result latency of `true` (spawn, cgroup, capture, exit, report),
  - throughput of N trivial commands submitted at once, under `command` and `ungated`.

Prints a table; the figures are this machine's, with no GPU involved.
Usage: .venv/bin/python benchmarks/dispatch.py [--n 1000]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

from krex_runtime.api import Client
from krex_runtime.testing.local_runtime import Runtime


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def round_trips(client: Client, type_: str, body: dict, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.call(type_, body)
        out.append(time.perf_counter() - t0)
    return out


def run_latency(client: Client, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.run(["true"])
        out.append(time.perf_counter() - t0)
    return out


def throughput(root: Path, policy: str, n: int, slots: int) -> float:
    rt = Runtime(root / policy, sim=2, policy=policy, slots=slots).start()
    try:
        with rt.client(timeout_s=60) as client:
            t0 = time.perf_counter()
            ids = [client.call("submit", {"argv": ["true"]})["id"] for _ in range(n)]
            for command_id in ids:
                client.call("wait", {"id": command_id, "attach": False}, timeout=600)
            return n / (time.perf_counter() - t0)
    finally:
        rt.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1000, help="commands per throughput run")
    p.add_argument("--samples", type=int, default=300)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rt = Runtime(root / "latency", sim=2, policy="ungated", slots=8).start()
        try:
            with rt.client() as client:
                hello = round_trips(client, "hello", {}, args.samples)
                submit = round_trips(client, "submit", {"argv": ["true"]}, args.samples)
                time.sleep(2)
                e2e = run_latency(client, args.samples // 3)
        finally:
            rt.stop()
        rates = {policy: throughput(root, policy, args.n, 8) for policy in ("command", "ungated")}
    print(f"# dispatch benchmark — {platform.node()}, {platform.machine()}, {Path('/proc/cpuinfo').read_text().count('processor')} cores, simulated GPUs")
    print(f"{'measure':<44} {'p50 ms':>9} {'p99 ms':>9}")
    for name, samples in (
        ("hello round trip", hello),
        ("submit round trip (admission only)", submit),
        ("submit -> result of `true` (2 GPUs, 8 slots)", e2e),
    ):
        p50, p99 = quantiles(samples)
        print(f"{name:<44} {p50 * 1e3:>9.2f} {p99 * 1e3:>9.2f}")
    print()
    print(f"{'throughput of ' + str(args.n) + ' x `true`, 2 GPUs':<44} {'cmd/s':>9}")
    for policy, rate in rates.items():
        slots = 1 if policy == "command" else 8
        print(f"{policy + f' ({slots} slot(s) per GPU)':<44} {rate:>9.1f}")
    print(f"{'ratio ungated / command':<44} {rates['ungated'] / rates['command']:>9.2f}")


if __name__ == "__main__":
    main()
