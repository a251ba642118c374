"""Prometheus metrics of a node, served at http://HOST:PORT/metrics
(`[telemetry] prometheus_listen`, off by default; docs/metrics.md).

Everything comes from the event log: gauges and counters are read at scrape
time from the node state the one reducer keeps (EventLog.state), and the
latency histograms observe the region events as the sink emits them
(`observe`). There is no bookkeeping of its own beside that state.

Adding a per-GPU gauge is one row in GPU_GAUGES (a name, its help and a
function of the GPU's state that returns a number, or None for "not known":
missing data is left out of the scrape rather than reported as 0).

The endpoint is served on the runtime's event loop, so a scrape reads the
state between two events, never half-way through one.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from krex_runtime.wire.model import GpuState, NodeState
from krex_runtime.wire.reducer import POOL_STATES
from krex_runtime.wire.version import krex_version

log = logging.getLogger("krex.metrics")

Number = float | int | None


@dataclass(frozen=True)
class GpuGauge:
    name: str
    help: str
    value: Callable[[GpuState], Number]


def _canary(where: str) -> Callable[[GpuState], Number]:
    return lambda g: g.canary.get(f"{where}_p50") if g.canary else None


def _sample(key: str, scale: float = 1.0) -> Callable[[GpuState], Number]:
    def read(g: GpuState) -> Number:
        value = g.telemetry.get(key)
        return value * scale if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return read


# One row per gauge, labelled by GPU index and UUID.
GPU_GAUGES: tuple[GpuGauge, ...] = (
    GpuGauge("krex_gpu_queued_commands", "Commands queued for this GPU (asked for it by index).", lambda g: g.queued),
    GpuGauge("krex_gpu_running_tenants", "Commands running on this GPU.", lambda g: len(g.running)),
    GpuGauge("krex_gpu_slots", "Commands this GPU runs at once.", lambda g: g.slots),
    GpuGauge("krex_gpu_frozen_tenants", "Tenants frozen by the region held now.", lambda g: len(g.frozen)),
    GpuGauge("krex_gpu_parked_tenant_threads", "Tenant threads parked at the gate.", lambda g: g.parked),
    GpuGauge("krex_gpu_draining_tenants", "Tenants asked to drain and not yet done.", lambda g: g.draining),
    GpuGauge("krex_gpu_admission_paused", "1 while admission to this GPU is paused.", lambda g: int(g.paused)),
    GpuGauge("krex_region_queue_depth", "Region requests waiting for this GPU.", lambda g: len(g.region_queue)),
    GpuGauge("krex_region_held", "1 while a region or lease holds this GPU.", lambda g: int(g.region_holder is not None)),
    GpuGauge("krex_canary_inflation_inside_ratio", "Canary inflation inside regions (median of the window; 0 = none).",
             _canary("inside")),
    GpuGauge("krex_canary_inflation_outside_ratio", "Canary inflation outside regions (median of the window).",
             _canary("outside")),
    GpuGauge("krex_gpu_sm_clock_hertz", "SM clock.", _sample("sm_clock_mhz", 1e6)),
    GpuGauge("krex_gpu_utilization_ratio", "GPU utilisation (0 to 1).", _sample("util_pct", 0.01)),
    GpuGauge("krex_gpu_memory_used_bytes", "GPU memory in use.", _sample("mem_used")),
    GpuGauge("krex_gpu_temperature_celsius", "GPU temperature.", _sample("temp_c")),
    GpuGauge("krex_gpu_power_watts", "GPU power draw.", _sample("power_w")),
)

# Final states of a command as the reducer counts them (NodeState.totals).
FINAL_STATES = ("finished", "timeout", "cancelled", "failed")
# Region timings: entry (closing the gate to the grant, waiting excluded) spans
# sub-millisecond to drain timeouts; holds are benchmark loops, up to the hold limit.
ENTRY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HOLD_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


class NodeCollector(Collector):
    """Reads the reducer's state at scrape time."""

    def __init__(self, state: Callable[[], NodeState]) -> None:
        self._state = state

    def collect(self) -> Iterable[Metric]:
        s = self._state()
        info = GaugeMetricFamily("krex_runtime_info", "The runtime: node, policy, version.",
                                 labels=["node", "policy", "version"])
        info.add_metric([s.node, s.policy, krex_version()], 1)
        yield info
        yield GaugeMetricFamily("krex_runtime_start_time_seconds", "When the runtime started (Unix time).",
                                value=s.started_at)
        yield GaugeMetricFamily("krex_queued_commands", "Commands queued on the node.", value=len(s.queue))
        yield GaugeMetricFamily("krex_admission_paused", "1 while admission to the node is paused.", value=int(s.paused))
        submitted = CounterMetricFamily("krex_commands_submitted", "Commands submitted.")
        submitted.add_metric([], s.totals.get("submitted", 0))
        yield submitted
        ended = CounterMetricFamily("krex_commands_ended", "Commands by final state.", labels=["state"])
        for state in FINAL_STATES:
            ended.add_metric([state], s.totals.get(state, 0))
        yield ended
        lost = CounterMetricFamily("krex_trace_events_lost", "Events the trace could not record.")
        lost.add_metric([], s.totals.get("trace_events_lost", 0))
        yield lost
        yield from self._gpus(s)

    def _gpus(self, s: NodeState) -> Iterable[Metric]:
        gpus = [(str(g.index), g.uuid, g) for g in s.gpus.values()]
        for gauge in GPU_GAUGES:
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=["gpu", "uuid"])
            for index, uuid, g in gpus:
                value = gauge.value(g)
                if value is not None:
                    family.add_metric([index, uuid], value)
            yield family
        granted = CounterMetricFamily("krex_regions_granted", "Regions and leases granted.", labels=["gpu", "uuid"])
        started = CounterMetricFamily("krex_gpu_commands_started", "Commands started on this GPU.", labels=["gpu", "uuid"])
        workers = GaugeMetricFamily("krex_pool_workers", "Context processes of the pool by state.",
                                    labels=["gpu", "uuid", "state"])
        replaced = CounterMetricFamily("krex_pool_workers_replaced", "Context processes replaced, by cause.",
                                       labels=["gpu", "uuid", "cause"])
        for index, uuid, g in gpus:
            granted.add_metric([index, uuid], g.regions_granted)
            started.add_metric([index, uuid], g.started)
            for state in POOL_STATES:
                workers.add_metric([index, uuid, state], g.pool.get(state, 0))
            for cause, count in sorted(g.pool.get("reasons", {}).items()):
                replaced.add_metric([index, uuid, cause], count)
        yield from (granted, started, workers, replaced)


class Metrics:
    """The registry of one runtime: the state collector and the region histograms."""

    def __init__(self, state: Callable[[], NodeState]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(NodeCollector(state))
        ProcessCollector(namespace="krex_runtime", registry=self.registry)
        labels = ["gpu"]
        self.entry = Histogram("krex_region_entry_seconds", "Region entry: gate closed to grant, queueing excluded.",
                               labels, buckets=ENTRY_BUCKETS, registry=self.registry)
        self.wait = Histogram("krex_region_wait_seconds", "Time a region request waited in the queue.",
                              labels, buckets=WAIT_BUCKETS, registry=self.registry)
        self.hold = Histogram("krex_region_hold_seconds", "Regions held, grant to release.",
                              labels, buckets=HOLD_BUCKETS, registry=self.registry)

    def observe(self, event: dict[str, Any]) -> None:
        """Called by the event log after each event is folded (its wire dict)."""
        kind = event.get("type")
        if kind == "runtime_started":  # every GPU's series from the start, zero until a region comes
            for gpu in event["gpus"]:
                for histogram in (self.entry, self.wait, self.hold):
                    histogram.labels(str(gpu["index"]))
        elif kind == "region_granted":
            gpu = str(event["gpu"])
            _observe(self.entry, gpu, event.get("enter_s"))
            _observe(self.wait, gpu, event.get("wait_s"))
        elif kind == "region_released":
            _observe(self.hold, str(event["gpu"]), event.get("hold_s"))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _observe(histogram: Histogram, gpu: str, value: Any) -> None:
    if isinstance(value, (int, float)) and value >= 0:
        histogram.labels(gpu).observe(value)


class MetricsServer:
    """A minimal HTTP/1.0 server for GET /metrics on the event loop."""

    MAX_REQUEST = 8192

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        self.metrics, self.host, self.port = metrics, host, port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, _, rest = head[: self.MAX_REQUEST].decode("latin-1").partition(" ")
            path = rest.split(" ", 1)[0].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, body, kind = "405 Method Not Allowed", b"GET /metrics only\n", "text/plain"
            elif path != "/metrics":
                status, body, kind = "404 Not Found", b"see /metrics\n", "text/plain"
            else:
                status, body, kind = "200 OK", self.metrics.exposition(), CONTENT_TYPE_LATEST
            writer.write(
                f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode() + (body if method == "GET" else b"")
            )
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except Exception:  # a scrape must never take the runtime down
            log.exception("metrics request failed")
        finally:
            writer.close()
