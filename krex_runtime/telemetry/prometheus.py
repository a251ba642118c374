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
state between two events, never half-way through one; what its clients can
cost that loop is bounded (MetricsServer).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from krex_runtime.wire.state.model import GpuState, NodeState
from krex_runtime.wire.state.reducer import POOL_STATES
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
    GpuGauge("krex_region_clock_cost_ratio",
             "What the SM clock cost verified regions' measurements: top clock / lowest clock - 1, median of the last 100.",
             lambda g: g.estimate.get("inside_p50") if g.estimate else None),
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
# An exposition is served again, unchanged, for this long while no event came.
BUILT_FOR_S = 1.0
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
        self._state = state
        self._built: tuple[int, float, bytes] | None = None  # (seq, when, exposition)
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
        """The scrape, built once per event (and at most BUILT_FOR_S old, for
        the process metrics, which change without one): a client scraping in a
        loop costs a copy per scrape, not a walk of the state."""
        seq, now = self._state().seq, time.monotonic()
        if self._built is None or self._built[0] != seq or now - self._built[1] > BUILT_FOR_S:
            self._built = (seq, now, generate_latest(self.registry))
        return self._built[2]


def _observe(histogram: Histogram, gpu: str, value: Any) -> None:
    if isinstance(value, (int, float)) and value >= 0:
        histogram.labels(gpu).observe(value)


class MetricsServer:
    """A minimal HTTP/1.0 server for GET /metrics on the event loop, bounded
    whatever its clients do, since it shares the loop with the region plane:

    - at most `max_connections` connections are open at once; while that
      many are, no more is accepted (the kernel's listen queue holds them,
      then refuses them), so a flood of connections costs the loop nothing;
    - each connection has REQUEST_TIMEOUT_S for its request and the reply,
      then is closed: an idle or half-open one (connected, never a request)
      keeps its place that long and no longer;
    - the exposition is built once per event (Metrics.exposition), so
      scrapes in a row cost a copy each, not a walk of the state.

    A flood can keep scrapes out while it lasts; it cannot stall the loop."""

    MAX_REQUEST = 8192
    REQUEST_TIMEOUT_S = 5.0
    BACKLOG = 64

    def __init__(self, metrics: Metrics, host: str, port: int, max_connections: int = 16) -> None:
        self.metrics, self.host, self.port = metrics, host, port
        self.max_connections = max_connections
        self.open_connections = 0
        self._slots = asyncio.Semaphore(max_connections)
        self._listening: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen on every address HOST names; OSError (with its errno) when one cannot be bound."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._listening.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(self.BACKLOG)
                sock.setblocking(False)
        except BaseException:
            await self.close()
            raise
        for sock in self._listening:
            self._spawn(self._accept(sock))

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sock in self._listening:
            sock.close()
        self._listening.clear()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()  # a place first: at the cap nothing is accepted
            try:
                conn, _ = await loop.sock_accept(listening)
            except OSError as exc:  # out of descriptors, a connection reset in the queue
                self._slots.release()
                log.debug("metrics: accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            except BaseException:
                self._slots.release()
                raise
            self.open_connections += 1
            self._spawn(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.REQUEST_TIMEOUT_S):
                head = await self._read_head(loop, conn)
                if head is not None:
                    await loop.sock_sendall(conn, self._respond(head))
        except (TimeoutError, OSError):
            pass
        except Exception:  # a scrape must never take the runtime down
            log.exception("metrics request failed")
        finally:
            conn.close()
            self.open_connections -= 1
            self._slots.release()

    async def _read_head(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes | None:
        """The request up to its blank line; None when the client closed first
        or sent more than MAX_REQUEST without one."""
        head = b""
        while b"\r\n\r\n" not in head:
            if len(head) > self.MAX_REQUEST:
                return None
            chunk = await loop.sock_recv(conn, 4096)
            if not chunk:
                return None
            head += chunk
        return head

    def _respond(self, head: bytes) -> bytes:
        method, _, rest = head[: self.MAX_REQUEST].decode("latin-1").partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            status, body, kind = "405 Method Not Allowed", b"GET /metrics only\n", "text/plain"
        elif path != "/metrics":
            status, body, kind = "404 Not Found", b"see /metrics\n", "text/plain"
        else:
            status, body, kind = "200 OK", self.metrics.exposition(), CONTENT_TYPE_LATEST
        return (
            f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode() + (body if method == "GET" else b"")
        )
