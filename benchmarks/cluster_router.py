"""Router throughput: trivial commands per second direct to one node's
runtime, and through the cluster gateway (pinned to one node, then spread
over three), in one run on this machine (simulated GPUs).

  .venv/bin/python benchmarks/cluster_router.py [--commands 600] [--submitters 4] [--in-flight 8]

Each setup runs the same `true` commands from the same number of submitter
threads, each with its own Client and at most --in-flight commands
submitted at a time. Every node (the direct one included) is a runtime on 2
simulated GPUs with 4 slots each; the cluster is 3 Ray nodes of
ray.cluster_utils on this machine, so its nodes share this machine's cores.
Prints one table: commands, seconds, commands per second, and the ratio to
direct.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from krex_cluster.testing import KrexCluster
from krex_runtime.api import Client
from krex_runtime.api.results import Command
from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime


def throughput(endpoint: str, commands: int, submitters: int, in_flight: int, **options: Any) -> tuple[float, int]:
    """Seconds for `commands` trivial commands from `submitters` threads, and how many ended ok."""
    per = [commands // submitters + (1 if i < commands % submitters else 0) for i in range(submitters)]
    ok = [0] * submitters
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        try:
            with Client(endpoint, timeout=60) as c:
                batch = [Command(["true"], label=f"b{i}-{j}", **options) for j in range(per[i])]
                ok[i] = sum(r.ok for r in c.map(batch, max_in_flight=in_flight))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(submitters)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - t0, sum(ok)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commands", type=int, default=600)
    p.add_argument("--submitters", type=int, default=4)
    p.add_argument("--in-flight", type=int, default=8, help="per submitter")
    args = p.parse_args()
    n, s, m = args.commands, args.submitters, args.in_flight
    rows: list[tuple[str, float, int]] = []
    with tempfile.TemporaryDirectory(prefix="krex-router-") as tmp:
        root = Path(tmp)
        direct = Runtime(root / "direct", sim=2, slots=4, keep_finished=200).start()
        try:
            endpoint = f"ipc://{direct.run_dir / 'control.sock'}"
            throughput(endpoint, 40, s, m)  # warm-up
            rows.append(("direct to one node", *throughput(endpoint, n, s, m)))
        finally:
            direct.stop()
            remove_device(direct.device)
        cluster = KrexCluster(root / "cluster").start()
        try:
            throughput(cluster.endpoint, 40, s, m)
            rows.append(("cluster, pinned to one node", *throughput(cluster.endpoint, n, s, m, node_labels={"host": "n1"})))
            rows.append(("cluster, 3 nodes", *throughput(cluster.endpoint, n, s, m)))
        finally:
            cluster.shutdown()
            for rt in cluster.runtimes.values():
                remove_device(rt.device)
    base = n / rows[0][1]
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"simulated GPUs (2 per node, 4 slots each); {n} `true` commands, {s} submitters x {m} in flight")
    print(f"{'setup':<30} {'ok':>6} {'s':>7} {'cmds/s':>8} {'x direct':>9}")
    for name, seconds, ok in rows:
        rate = n / seconds
        print(f"{name:<30} {ok:>6} {seconds:>7.2f} {rate:>8.1f} {rate / base:>9.2f}")
    return 0 if all(ok == n for _, _, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
