"""The krex-runtime service: start-up, the tasks it runs, and shutdown.

Start: claim the host (service/host.py), start the watchdog that undoes a
death of the runtime (watchdog.py), bind the sockets (server.py), open
the trace and the event log (event_log.py), build the node's components
(node.py), give its dispatcher the commands earlier runs ended
(commands/finished_record.py), serve the verb handlers (handlers.py) and, if configured, the
Prometheus endpoint (telemetry/prometheus.py); then tell systemd it is ready
(notify.py). Stop (SIGTERM, SIGINT): refuse new commands, end regions, finish
or cancel what runs, and leave nothing frozen, gated, claimed or bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from krex_runtime.commands import finished_record
from krex_runtime.commands.finished_record import RECORD_FILE, FinishedRecord
from krex_runtime.node import access
from krex_runtime.node.config import Config, listen_address, resolve_run_dir
from krex_runtime.node.gpus import Gpu
from krex_runtime.service import handlers
from krex_runtime.service import node as node_build
from krex_runtime.service.event_log import EventLog
from krex_runtime.service.followers import result_record
from krex_runtime.service.heartbeat import Heartbeat
from krex_runtime.service.host import Host, StartupError, prepare
from krex_runtime.service.node import Node
from krex_runtime.service.notify import Notifier
from krex_runtime.service.server import ControlServer
from krex_runtime.service.watchdog import Watchdog
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.state import events
from krex_runtime.wire.trace.jsonl import TraceWriter, check_trace_path

if TYPE_CHECKING:
    from krex_runtime.telemetry.prometheus import MetricsServer

__all__ = ["RuntimeService", "StartupError"]

log = logging.getLogger("krex.runtime")


class RuntimeService:
    def __init__(self, config: Config, gpus: list[Gpu]) -> None:
        self.config = config
        self.gpus = gpus
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self.notifier = Notifier(None, None)

    def request_stop(self, reason: str) -> None:
        self._stop_reason = reason
        self._stop.set()

    async def run(self) -> None:
        """Start-up is one transaction: every resource is registered for release
        the moment it exists, so a failure at any step (and the stop at the end)
        releases all that was made before it, in reverse order: regions, telemetry,
        the trace, the sockets, the cgroup slice, the claims."""
        self.notifier = Notifier.from_environment()  # before any tenant inherits the variables
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            # From the start: a stop asked for during start-up is served once it is up.
            loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
        with contextlib.ExitStack() as made:
            made.callback(self.notifier.close)
            self._check_trace_path()  # before anything is made: a FIFO there would block the start for good
            host = prepare(self.config, self.gpus)
            made.callback(host.release)
            if self.config.runtime.watchdog:  # from here on a death of this process is undone (service/watchdog.py)
                try:
                    made.callback(Watchdog.start(host.run_dir).stop)
                except OSError as exc:
                    raise StartupError(f"cannot start the watchdog: {exc.strerror or exc}") from None
            server = ControlServer(self.config, host.run_dir, host.curve_keys)
            made.callback(server.close)
            trace = self._open_trace(host)
            made.callback(trace.close)
            event_log = EventLog(trace, server.publish)
            node = node_build.build(self.config, self.gpus, host, event_log, server)
            made.callback(node_build.close_regions, node, host)
            self._remember_finished(host, event_log, node, made)
            if node.channel is not None:
                made.callback(_remove_socket, node.channel.path)
            made.callback(node.telemetry.close)
            heartbeat = None
            if node.regions is not None:
                regions = self.config.regions
                heartbeat = Heartbeat(node.regions.manager.stamp_heartbeats, regions.heartbeat_interval_s,
                                      regions.stale_after_s)
                made.callback(heartbeat.stop)  # before the gates are unmapped
            await self._serve(host, server, event_log, node, heartbeat)

    def _remember_finished(self, host: Host, event_log: EventLog, node: Node, made: contextlib.ExitStack) -> None:
        """The commands earlier runs ended stay answerable (`wait` finds them),
        and this run records its own for the next (commands/finished_record.py)."""
        record = FinishedRecord(host.run_dir / RECORD_FILE, self.config.dispatcher.keep_finished, host.output_dir)
        node.dispatcher.remember(record.load())
        made.callback(record.close)
        event_log.observers.append(
            finished_record.observer(record, node.dispatcher.jobs.get, lambda job: result_record(job, event_log.state))
        )

    async def _serve(
        self, host: Host, server: ControlServer, event_log: EventLog, node: Node, heartbeat: Heartbeat | None
    ) -> None:
        metrics = await self._start_metrics(event_log)
        try:
            await self._serve_node(host, server, event_log, node, heartbeat)
        finally:
            if metrics is not None:
                await metrics.close()

    async def _serve_node(
        self, host: Host, server: ControlServer, event_log: EventLog, node: Node, heartbeat: Heartbeat | None
    ) -> None:
        node_build.open_regions_to_tenants(node, host)
        if node.channel is not None:
            try:  # before anything runs: a channel that cannot listen stops the start-up
                await node.channel.start()
            except OSError as exc:
                raise StartupError(f"cannot serve the region channel on {node.channel.path}: {exc.strerror or exc}") from None
            access.open_to_tenants(node.channel.path, host.tenant_user, 0o660)
        event_log.emit(
            events.RuntimeStarted(
                node=socket.gethostname(),
                policy=self.config.runtime.policy,
                pid=os.getpid(),
                keep_finished=self.config.runtime.snapshot_finished,
                gpus=[node.gpu_record(g) for g in self.gpus],
                cgroups=host.cgroups,
                regions=node.describe_regions(),
                recovered=host.recovered,
            )
        )
        tasks: list[asyncio.Task[None]] = []
        try:
            context = handlers.Context(node, event_log, host.run_dir, host.cgroups)
            tasks += server.serve(handlers.table(context), node.tenancy.refuse_tenants)
            tasks.append(asyncio.create_task(self._snapshots(event_log)))
            tasks.append(asyncio.create_task(node.telemetry.run()))
            tasks.append(asyncio.create_task(self.notifier.watchdog()))
            if node.regions is not None and heartbeat is not None:
                node.regions.manager.start()
                heartbeat.start()
                tasks.append(asyncio.create_task(self._loop_alive(heartbeat)))
            if node.canaries is not None:
                node.canaries.start(node.dispatcher)
            self._log_started(host, node)
            tasks.append(asyncio.create_task(node.dispatcher.follow_pools()))
            node.pools.start()
            self.notifier.ready(f"serving {len(self.gpus)} GPU(s) under policy {self.config.runtime.policy}")
            await self._stop.wait()
            self.notifier.stopping(f"stopping ({self._stop_reason})")
        finally:
            # Also after a failure once serving: end what was started before letting go of the node.
            try:
                await self._shutdown(event_log, node)
            finally:
                for task in tasks:
                    task.cancel()

    async def _start_metrics(self, event_log: EventLog) -> MetricsServer | None:
        listen = self.config.telemetry.prometheus_listen
        if not listen:
            return None
        from krex_runtime.telemetry.prometheus import Metrics, MetricsServer  # prometheus_client only when asked for

        address = listen_address(listen)
        assert address is not None  # the config's validation checked it
        metrics = Metrics(lambda: event_log.state)
        server = MetricsServer(metrics, *address, max_connections=self.config.telemetry.prometheus_max_connections)
        try:
            await server.start()
        except OSError as exc:
            raise StartupError(f"cannot serve metrics on {listen}: {os.strerror(exc.errno) if exc.errno else exc}") from None
        event_log.observers.append(metrics.observe)
        log.info("metrics: http://%s/metrics", listen)
        return server

    async def _shutdown(self, event_log: EventLog, node: Node) -> None:
        log.info("stopping (%s): %s running commands", self._stop_reason, self.config.runtime.on_shutdown)
        event_log.emit(events.RuntimeStopping(reason=self._stop_reason))
        node.dispatcher.stop_admitting()
        node.pools.stop_replacing()
        if node.regions is not None and node.channel is not None:
            await node.channel.close()
            await node.regions.manager.shutdown()
        await node.dispatcher.shutdown(self.config.runtime.on_shutdown, self.config.runtime.shutdown_grace_s)
        await node.pools.shutdown()
        event_log.emit(events.RuntimeStopped())

    def _trace_path(self, run_dir: Path) -> Path:
        return Path(self.config.runtime.trace_path) if self.config.runtime.trace_path else run_dir / "trace.jsonl"

    def _check_trace_path(self) -> None:
        path = self._trace_path(resolve_run_dir(self.config))
        try:
            check_trace_path(path)
        except OSError as exc:
            raise StartupError(f"cannot write the trace {path}: {exc.strerror or exc}") from None

    def _open_trace(self, host: Host) -> TraceWriter:
        path = self._trace_path(host.run_dir)
        header = {
            "node": socket.gethostname(),
            "started_at": time.time(),
            "policy": self.config.runtime.policy,
            "config_digest": self.config.digest,
            "config_source": self.config.source,
            "gpus": [node_build.gpu_record(self.config, g) for g in self.gpus],
        }
        try:
            return TraceWriter(path, header, rotate_bytes=self.config.runtime.trace_rotate_bytes)
        except OSError as exc:
            raise StartupError(f"cannot write the trace {path}: {exc.strerror or exc}") from None

    async def _snapshots(self, event_log: EventLog) -> None:
        while True:
            await asyncio.sleep(self.config.runtime.snapshot_interval_s)
            event_log.publish_snapshot()

    async def _loop_alive(self, heartbeat: Heartbeat) -> None:
        """Show the heartbeat thread the loop runs (service/heartbeat.py)."""
        while True:
            heartbeat.loop_alive()
            await asyncio.sleep(heartbeat.interval_s)

    def _log_started(self, host: Host, node: Node) -> None:
        if node.regions is not None:
            described = node.regions.describe()
            log.info(
                "regions: gate backend %s, freezer %s, reserved cores %s%s",
                described["gate_backend"],
                described["freezer"],
                described["reserved_cores"],
                f" ({node.regions.cpus.note})" if node.regions.cpus.note else "",
            )
        log.info(
            "serving %d %sGPU(s) under policy '%s' at %s",
            len(self.gpus),
            "simulated " if self.gpus and self.gpus[0].simulated else "",
            self.config.runtime.policy,
            endpoints.control(host.run_dir),
        )
        clients_look = os.environ.get(endpoints.RUN_DIR_ENV)
        if clients_look and Path(clients_look).absolute() != host.run_dir.absolute():
            # The run dir is found as every client finds it (--run-dir, else KREX_RUN_DIR, else the
            # default), runtime.run_dir standing in for --run-dir: here the two part.
            log.warning("%s=%s here, where krex and krex-console will look; this runtime serves in %s "
                        "(--run-dir or runtime.run_dir)", endpoints.RUN_DIR_ENV, clients_look, host.run_dir)
        slice_ = host.cgroup_slice
        log.info("cgroups: %s", f"v{slice_.version} at {slice_.path}" if slice_ else "none; using process groups")


def _remove_socket(path: Path) -> None:
    """The region socket, if it is one (a release must never raise: what is
    in the way of the socket is not the runtime's)."""
    try:
        if path.is_socket():
            path.unlink()
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc.strerror)
