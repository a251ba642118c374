"""What operators need to trust the measurements: GPU metrics, gate counts and
the canary's inflation estimate, all as events (so replay shows them too).

  telemetry        every sample interval: per GPU, the metrics (gpu_metrics)
                   and how many tenant threads are parked or draining;
  canary_baseline  a canary's idle-GPU times of its reference kernels;
  canary_sample    one measurement, inside or outside a region.

The window statistics (inflation p50/p95, contention factor) are computed by
the reducer from these events, so the live state and replay agree.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from krex_runtime.node.config import Config
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.sink import EventSink
from krex_runtime.regions.gate.core import Gate
from krex_runtime.telemetry import gpu_metrics
from krex_runtime.telemetry.clocks import Clocks
from krex_runtime.wire.state import events

log = logging.getLogger("krex.telemetry")

CANARY_RESTART_S = 5.0
HELD_SKIP_S = 5.0  # a GPU held this long is read all the same


def gate_counts(gate: Gate) -> dict[str, int]:
    procs = gate.processes()
    return {
        "parked": sum(e.parked for e in procs),
        "draining": sum(1 for e in procs if e.drain_req != e.drain_ack),
    }


class Telemetry:
    def __init__(
        self,
        config: Config,
        gpus: list[Gpu],
        sink: EventSink,
        gates: dict[int, Gate],
        clocks: Clocks,
    ) -> None:
        self.config = config
        self.gpus = gpus
        self._emit = sink.emit
        self.gates = gates
        self.clocks = clocks
        self.sampler = clocks.sampler
        self.latest: dict[int, dict[str, Any]] = {}
        self._sampled_at: dict[int, float] = {}  # GPU index -> when it was last read (time.monotonic())
        self._partial: dict[str, str] = {}
        # GPU index -> pids using it that are not tenants of this runtime (None: n/a);
        # the node sets it once it can tell tenants apart (telemetry/gpu_processes.py).
        self.foreign_processes: Callable[[int], list[int] | None] = lambda gpu: None
        # GPU index -> GPU memory per process (gpu_processes.process_memory; None: n/a).
        self.process_memory: Callable[[int], list[dict[str, Any]] | None] = lambda gpu: None

    async def run(self) -> None:
        interval = self.config.telemetry.sample_interval_s
        while True:
            metrics = await asyncio.to_thread(self._sample)
            for key, sample in metrics.items():
                gate = self.gates.get(int(key))
                counts = gate_counts(gate) if gate is not None else {"parked": None, "draining": None}
                sample.update(counts)
                self.latest[int(key)] = sample
            self._emit(events.Telemetry(gpus=metrics))
            await asyncio.sleep(interval)

    def _held_now(self) -> list[Gpu]:
        """GPUs whose gate is closed (a region or a lease holds them) and that
        were sampled less than HELD_SKIP_S ago. NVML's queries (the process
        list above all) go through the driver, and asked often they slowed a
        holder's trials on the H100 (benchmarks/perturbation_probe.py,
        docs/BENCHMARKS.md): a held GPU is read after its release instead, or
        after HELD_SKIP_S (a lease lasts hours; its operator still sees it)."""
        now = time.monotonic()
        held = []
        for g in self.gpus:
            gate = self.gates.get(g.index)
            if gate is not None and gate.is_closed and now - self._sampled_at.get(g.index, 0.0) < HELD_SKIP_S:
                held.append(g)
        return held

    def _sample(self) -> dict[str, dict[str, Any]]:
        held = self._held_now()
        gpus = [g for g in self.gpus if g not in held]
        metrics = gpu_metrics.sample_all(self.sampler, gpus)
        now = time.monotonic()
        for g in gpus:
            self._sampled_at[g.index] = now
        for key, sample in metrics.items():
            try:
                sample["foreign"] = self.foreign_processes(int(key))
            except Exception:  # missing data is a value
                sample["foreign"] = None
            try:
                sample["process_memory"] = self.process_memory(int(key))
            except Exception:
                sample["process_memory"] = None
        # A held GPU keeps its last reading, its own time with it (the gate's counts, read by run(), stay fresh).
        return metrics | {str(g.index): dict(self.latest[g.index]) for g in held if g.index in self.latest}

    # --- canaries -----------------------------------------------------------------

    def canary_argv(self, gpu: Gpu) -> list[str]:
        t = self.config.telemetry
        argv = [
            sys.executable, "-m", "krex_runtime.tenant.canary",
            "--device", "sim" if gpu.simulated else "torch",
            "--period", str(t.canary_period_s),
            "--target-ms", str(t.canary_target_ms),
            "--warm-s", "0.2" if gpu.simulated else "2.0",
        ]
        return argv + (["--outside"] if t.canary_outside else [])

    def canary_output(self, gpu: int, command_id: str, data: bytes) -> None:
        """Fold a canary's stdout, line by line, into events."""
        text = self._partial.pop(command_id, "") + data.decode(errors="replace")
        *lines, rest = text.split("\n")
        if rest:
            self._partial[command_id] = rest
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                log.warning("GPU %d canary wrote a line that is not JSON: %r", gpu, line[:200])
                continue
            clock = self.clocks.now(gpu)
            common = {
                "gpu": gpu,
                "compute_ms": record.get("compute_ms"),
                "memory_ms": record.get("memory_ms"),
                "sm_clock_mhz": clock.get("sm_clock_mhz"),
                "throttle": clock.get("throttle"),
            }
            if record.get("type") == "baseline":
                self._emit(events.CanaryBaseline(window=self.config.telemetry.canary_window, **common))
            elif record.get("type") == "sample":
                self._emit(events.CanarySample(where=record.get("where", "inside"), flagged=bool(clock["flags"]), **common))

    def close(self) -> None:
        self.sampler.close()
