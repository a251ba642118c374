"""A synthetic kernel-agent workload for the demo: keeps N candidates in flight.

    python -m krex_runtime.demo.workload [--inflight 12] [--count 0]

Each candidate is `python -m krex_runtime.demo.candidate` with a random kernel
size and memory footprint, spending its time about as a kernel agent's
benchmark command does (starting and compiling most of it, a correctness
check on the GPU and a timing loop a tenth or so each); results are printed
as they finish.
Stops on Ctrl-C or after --count.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading

from krex_runtime.api import Client, RequestFailed, RuntimeUnavailable

CHECK_S, TIME_S = 0.15, 0.1  # GPU seconds per candidate: its correctness check, its timing loop


def _count(seconds: float, kernel_us: float) -> int:
    return max(5, min(300, int(seconds * 1e6 / kernel_us)))


def worker(n: int, args: argparse.Namespace, stop: threading.Event, done: list[int]) -> None:
    rng = random.Random(n)
    with Client(timeout=10) as client:
        while not stop.is_set():
            if args.count and len(done) >= args.count:
                return
            kernel_us = rng.choice([200, 500, 1000, 2000, 5000])
            argv = [
                sys.executable, "-m", "krex_runtime.demo.candidate",
                "--kernel-us", str(kernel_us),
                "--import-s", f"{rng.uniform(0.5, 2.0):.2f}",
                "--compile-s", f"{rng.uniform(0.05, 0.3):.2f}",
                "--mem-gb", str(rng.choice([0.5, 1, 2, 4, 6])),
                # About CHECK_S of kernels checking the output, TIME_S timing them.
                "--check-kernels", str(_count(CHECK_S, kernel_us)),
                "--repeats", str(_count(TIME_S, kernel_us)),
            ]
            try:
                reply = client.call("submit", {"argv": argv, "label": f"cand-{n}-{len(done)}", "timeout_s": 120})
                result = client.call("wait", {"id": reply["id"], "attach": False}, timeout=600)
            except (RequestFailed, RuntimeUnavailable) as exc:
                print(f"workload: {exc}", file=sys.stderr, flush=True)
                stop.wait(1.0)
                continue
            done.append(1)
            print(f"{result['id']} gpu {result['gpu']} {result['state']} exit {result['exit_code']} "
                  f"{result['run_s'] or 0:.2f}s", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--inflight", type=int, default=12)
    p.add_argument("--count", type=int, default=0, help="stop after this many (0: run until interrupted)")
    args = p.parse_args()
    stop = threading.Event()
    done: list[int] = []
    threads = [threading.Thread(target=worker, args=(n, args, stop, done), daemon=True) for n in range(args.inflight)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop.set()


if __name__ == "__main__":
    main()
