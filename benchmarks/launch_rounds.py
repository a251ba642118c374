"""What the launch-cost benchmarks share (intercept_launch_rate.py on a GPU,
integrity_cost.py on the simulator): gates stamped as a runtime would, the
environments of one tenant under them, and runs alternated round by round,
each pinned to one core, so that drift (clocks, other load) hits every
configuration alike.

Not a benchmark itself: imported by the two scripts next to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from krex_runtime.regions.gate import core as gate

TENANT = 1  # the benchmarked program's tenant id in the gates below
OFF = {"KREX_INTEGRITY": "0"}  # the library without its measurement-integrity bookkeeping


def launch_main(doc: str, measure: Callable[[argparse.Namespace, Path], int], launches: int, rounds: int,
                core: int) -> int:
    """Both scripts' main: --launches, --rounds and --core (these defaults),
    then measure(arguments, a temporary folder for the program and the gates)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--launches", type=int, default=launches)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--core", type=int, default=core, help="CPU core every run is pinned to")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="krex-launch-bench-") as tmp:
        return measure(ns, Path(tmp))


def clean_env() -> dict[str, str]:
    """This process's environment without KREX's variables and preloads."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}


@contextmanager
def gates(folder: Path) -> Iterator[tuple[Path, Path]]:
    """(open, held): two gates with TENANT admitted, both stamped by a
    heartbeat thread. `open` is as every tenant sees it between regions;
    `held` is closed with TENANT as its holder, as while TENANT holds its
    region: its launches pass, and each is logged for measurement integrity."""
    opened = gate.Gate.create(folder / "open.gate", max_procs=16)
    held = gate.Gate.create(folder / "held.gate", max_procs=16)
    for g in (opened, held):
        g.add_tenant(TENANT)
    held.close_gate(TENANT)
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.05):
            opened.stamp_heartbeat()
            held.stamp_heartbeat()

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        yield opened.path, held.path
    finally:
        stop.set()
        beat.join()
        held.open_gate()
        for g in (opened, held):
            g.detach(remove_tenants=True)


def under(library: Path, gate_path: Path | None, **extra: str) -> dict[str, str]:
    """The environment of the benchmarked program with `library` preloaded,
    as TENANT under `gate_path` (None: no gate)."""
    env = dict(clean_env(), LD_PRELOAD=str(library), **extra)
    if gate_path is not None:
        env.update(KREX_GATE_PATH=str(gate_path), KREX_TENANT_ID=str(TENANT))
    return env


def alternate(argv: list[str], configs: dict[str, dict[str, str]], rounds: int, core: int) -> dict[str, list[list[float]]]:
    """Run `argv` once per configuration (its environment) per round, in
    turn, pinned to `core`; each run's stdout is numbers separated by spaces.
    Returns, per configuration, one list of numbers per run."""
    out: dict[str, list[list[float]]] = {name: [] for name in configs}
    for _ in range(rounds):
        for name, env in configs.items():
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True,
                                  preexec_fn=lambda: os.sched_setaffinity(0, {core}))
            out[name].append([float(w) for w in done.stdout.split()])
    return out


def column(runs: list[list[float]], index: int) -> list[float]:
    return [run[index] for run in runs]


def median(runs: list[list[float]], index: int) -> float:
    return statistics.median(column(runs, index))
