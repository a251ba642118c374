"""The krex-runtime service: sockets, handler table, events, trace, shutdown.

Every state change goes through `emit`: it numbers the event, folds it into the
node state with the one reducer, appends it to the trace and publishes it. The
control socket answers requests through a handler table; the read-only socket
serves the same table without the handlers that change anything.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import psutil
import zmq
import zmq.asyncio

import krex_runtime
from krex_runtime.node import access, native_build
from krex_runtime.service import curve, peers
from krex_runtime.commands import cgroups, process_tree
from krex_runtime.wire import endpoints, protocol, verbs
from krex_runtime.regions import machinery as region_setup
from krex_runtime.wire import state as node_state
from krex_runtime.wire import events
from krex_runtime.commands.cgroups import CgroupSlice
from krex_runtime.node.config import Config, resolve_lock_dir, resolve_run_dir
from krex_runtime.commands.context_pool import ContextPool
from krex_runtime.commands.dispatcher import Dispatcher, Job, base_tenant_env
from krex_runtime.node.gpus import Gpu
from krex_runtime.regions.leases import LeaseDesk
from krex_runtime.node.locks import Claim, claim
from krex_runtime.service.peers import Credentials
from krex_runtime.wire.protocol import ErrorCode, ProtocolError, Request
from krex_runtime.regions.channel import RegionChannel, TenantIdentity
from krex_runtime.regions.manager import Tenant
from krex_runtime.regions.machinery import RegionMachinery
from krex_runtime.regions.tokens import TOKEN_ENV
from krex_runtime.telemetry.monitor import CANARY_RESTART_S, Telemetry
from krex_runtime.wire.trace import TraceWriter

log = logging.getLogger("krex.runtime")

Handler = Callable[["Peer", Request], Awaitable[Any]]


REGION_SOCKET = "region.sock"


class StartupError(Exception):
    """The runtime cannot start; the message is one line for the operator."""


@dataclass(frozen=True)
class Peer:
    """Who sent a request: the socket it came on, its routing frames, and on
    ipc the kernel's word on the sending process (None where libzmq has none)."""

    socket: zmq.asyncio.Socket
    route: tuple[bytes, ...]
    read_only: bool
    credentials: Credentials | None = None
    remote: bool = False  # came over tcp, from a client with an authorized CURVE key


@dataclass
class Attachment:
    peer: Peer
    request_id: str
    decoders: dict[str, codecs.IncrementalDecoder]


class RuntimeService:
    def __init__(self, config: Config, gpus: list[Gpu]) -> None:
        self.config = config
        self.gpus = gpus
        self.run_dir = resolve_run_dir(config)
        self.state = node_state.NodeState()
        self._seq = 0
        self._claims: list[Claim] = []
        self._attached: dict[str, list[Attachment]] = {}
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self.ctx = zmq.asyncio.Context()
        self.handlers: dict[str, Handler] = {
            "hello": self._hello,
            "status": self._status,
            "snapshot": self._snapshot,
            "wait": self._wait,
            "submit": self._submit,
            "cancel": self._cancel,
            "pause": self._pause,
            "resume": self._resume,
            "lease": self._lease,
            "release": self._release_lease,
            "recycle": self._recycle,
        }
        self.changing = verbs.CHANGING
        self.pool: ContextPool | None = None
        self.regions: RegionMachinery | None = None
        self.channel: RegionChannel | None = None
        self.recovered: list[str] = []
        self.leases: LeaseDesk | None = None
        self.telemetry: Telemetry | None = None
        self.canaries: dict[int, Job] = {}
        self.tenant_user: access.TenantUser | None = None
        self.run_as = access.RunAs(None, 0o022)
        self.curve_keys: curve.ServerKeys | None = None
        self.authenticator: Any = None
        self.remote_control: zmq.asyncio.Socket | None = None
        self.remote_pub: zmq.asyncio.Socket | None = None

    # --- start-up -----------------------------------------------------------

    def _prepare(self) -> None:
        # Nothing the runtime creates is open to other users until it says so;
        # tenants get the umask it was started with back.
        umask = os.umask(access.RUNTIME_UMASK)
        try:
            self.tenant_user = access.tenant_user(self.config)
            self.curve_keys = curve.server_keys(self.config.runtime)
            access.prepare_run_dir(self.run_dir, access.run_dir_access(self.config, self.tenant_user is not None))
        except (access.AccessError, curve.CurveError) as exc:
            raise StartupError(str(exc)) from None
        self.run_as = access.RunAs(self.tenant_user, umask)
        info = f"krex-runtime pid {os.getpid()} (run dir {self.run_dir})"
        self._claims.append(claim(self.run_dir / "runtime.lock", f"run dir {self.run_dir}", info))
        lock_dir = resolve_lock_dir(self.config)
        for gpu in self.gpus:
            self._claims.append(claim(lock_dir / f"gpu-{gpu.uuid}.lock", f"GPU {gpu.index} ({gpu.uuid})", info))
        for name in (endpoints.CONTROL_SOCKET, endpoints.CONTROL_READ_ONLY_SOCKET, endpoints.TELEMETRY_SOCKET):
            (self.run_dir / name).unlink(missing_ok=True)
        self.output_dir = Path(self.config.tenants.output_dir) if self.config.tenants.output_dir else self.run_dir / "output"
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.library = native_build.interception_library()
        if self.config.tenants.preload and not self.library.exists():
            raise StartupError(
                f"the interception library {self.library} is not built: run `make -C native` "
                "(or set tenants.preload = false to run tenants unprotected)"
            )
        if self.tenant_user is not None:
            try:
                access.check_tenant_can_read(self.tenant_user, self._tenant_files())
            except access.AccessError as exc:
                raise StartupError(str(exc)) from None
        self.cgroup_slice = self._open_cgroups()
        self.recovered = region_setup.recover(self.run_dir, self.cgroup_slice)
        for line in self.recovered:
            log.warning("recovery: %s", line)
        if self.cgroup_slice is not None:
            for leftover in self.cgroup_slice.leftovers():
                log.warning("ending a command cgroup left by a previous run: %s", leftover)
                cgroups.kill_and_remove(leftover)

    def _open_cgroups(self) -> CgroupSlice | None:
        """cgroup v2 where writable, else the v1 freezer hierarchy (auto), or as configured."""
        choice = self.config.tenants.cgroups
        versions = {"auto": (2, 1), "v2": (2,), "v1": (1,), "off": ()}[choice]
        for version in versions:
            found = CgroupSlice.open(self.run_dir, version)
            if found is not None:
                return found
        if choice in ("v2", "v1"):
            log.warning("tenants.cgroups = %s: that hierarchy is not writable here; using process groups", choice)
        return None

    def _tenant_files(self) -> list[Path]:
        """What a tenant running as another user must be able to read."""
        files = [self.library] if self.config.tenants.preload else []
        if self.gpus and self.gpus[0].simulated:
            files.append(native_build.simulated_driver_dir())
        if self.config.pool.size_per_gpu > 0:
            files += [Path(sys.executable), Path(krex_runtime.__file__).parent]
        return files

    def _bind(self) -> None:
        """The ipc sockets, each with its owner, group and mode (access.py); tcp
        endpoints on sockets of their own, served with CURVE only."""
        self.control = self._router()
        self.control_ro = self._router()
        self.pub = self._publisher()
        _bind_to(self.control, endpoints.control(self.run_dir))
        _bind_to(self.control_ro, endpoints.control_read_only(self.run_dir))
        _bind_to(self.pub, endpoints.telemetry(self.run_dir))
        read_only = access.read_only_access(self.config)
        access.apply(self.run_dir / endpoints.CONTROL_SOCKET, access.control_access(self.config))
        access.apply(self.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET, read_only)
        access.apply(self.run_dir / endpoints.TELEMETRY_SOCKET, read_only)
        keys = self.curve_keys
        if keys is None:
            return
        self.authenticator = curve.start_authenticator(self.ctx, keys)
        if self.config.runtime.control_tcp:
            self.remote_control = self._router(keys)
            _bind_to(self.remote_control, self.config.runtime.control_tcp)
        if self.config.runtime.telemetry_tcp:
            self.remote_pub = self._publisher(keys)
            _bind_to(self.remote_pub, self.config.runtime.telemetry_tcp)

    def _router(self, keys: curve.ServerKeys | None = None) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.ROUTER)
        # zmq drops larger messages by closing the peer; keep that far above our own
        # limit so an oversized request still gets a `too_large` reply.
        sock.setsockopt(zmq.MAXMSGSIZE, max(self.config.runtime.max_message_bytes * 16, 64 << 20))
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            curve.serve_with(sock, keys)
        return sock

    def _publisher(self, keys: curve.ServerKeys | None = None) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        if keys is not None:
            curve.serve_with(sock, keys)
        return sock

    @property
    def _publishers(self) -> list[zmq.asyncio.Socket]:
        return [self.pub] if self.remote_pub is None else [self.pub, self.remote_pub]

    def _open_trace(self) -> None:
        path = Path(self.config.runtime.trace_path) if self.config.runtime.trace_path else self.run_dir / "trace.jsonl"
        self.trace_path = path
        self.trace = TraceWriter(
            path,
            {
                "node": socket.gethostname(),
                "started_at": time.time(),
                "policy": self.config.runtime.policy,
                "config_digest": self.config.digest,
                "config_source": self.config.source,
                "gpus": [self._gpu_record(g) for g in self.gpus],
            },
        )

    def _gpu_record(self, gpu: Gpu) -> dict[str, Any]:
        slots = 1 if self.config.runtime.policy == "command" else self.config.dispatcher.slots_per_gpu
        return {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "name": gpu.name,
            "memory_total": gpu.memory_total,
            "simulated": gpu.simulated,
            "slots": slots,
            "cpus": list(gpu.cpus),
            "pool_size": self.config.pool.size_per_gpu,
        }

    # --- events -------------------------------------------------------------

    def emit(self, event: events.Event) -> None:
        self._seq += 1
        wire = {"seq": self._seq, "t": time.time(), **events.to_wire(event)}
        node_state.apply(self.state, wire)
        self.trace.write(wire)
        frames = [protocol.TOPIC_EVENT, protocol.encode(wire)]
        for pub in self._publishers:
            pub.send_multipart(frames)

    def publish_snapshot(self) -> None:
        frames = [protocol.TOPIC_SNAPSHOT, protocol.encode(self._snapshot_body())]
        for pub in self._publishers:
            pub.send_multipart(frames)

    def _snapshot_body(self) -> dict[str, Any]:
        return {"seq": self.state.seq, "state": node_state.to_snapshot(self.state)}

    # --- tenants ------------------------------------------------------------

    def tenant_env(self, job: Job, gpu: Gpu) -> dict[str, str]:
        return self.identity_env(job.id, job.tenant_id, job.env, gpu)

    def identity_env(self, command_id: str, tenant_id: int | None, command_env: dict[str, str], gpu: Gpu) -> dict[str, str]:
        # Tenants may only read: they are pointed at the read-only socket.
        env = base_tenant_env(
            command_id, tenant_id, command_env, gpu, self.config.tenants.env, endpoints.control_read_only(self.run_dir),
            self.run_dir,
        )
        env.update(access.tenants_env(self.tenant_user))
        if self.config.tenants.preload:
            env["LD_PRELOAD"] = " ".join(p for p in (str(self.library), env.get("LD_PRELOAD", "")) if p)
        if self.regions is not None:
            env["KREX_GATE_PATH"] = str(region_setup.gate_path(self.run_dir, gpu.index))
            env["KREX_REGION_SOCKET"] = str(self.run_dir / REGION_SOCKET)
        if self.channel is not None and tenant_id is not None:
            env[TOKEN_ENV] = self.channel.tokens.token_for(tenant_id)
        if gpu.simulated:
            sim_dir = str(native_build.simulated_driver_dir())
            env["LD_LIBRARY_PATH"] = ":".join(p for p in (sim_dir, env.get("LD_LIBRARY_PATH", "")) if p)
            env["KREX_SIM_DEVICE"] = self.config.gpus.simulated_device
            env["KREX_SIM_GPUS"] = str(len(self.gpus))
            if self.config.gpus.simulated_log:
                env["KREX_SIM_LOG"] = self.config.gpus.simulated_log
        return env

    def _on_output(self, job: Job, stream: str, data: bytes) -> None:
        if job.internal and stream == "stdout" and self.telemetry is not None and job.gpu is not None:
            self.telemetry.canary_output(job.gpu, job.id, data)
        for att in self._attached.get(job.id, []):
            text = att.decoders[stream].decode(data)
            if text:
                self._push(att, protocol.PUSH_OUTPUT, {"id": job.id, "stream": stream, "data": text})

    def _on_finished(self, job: Job) -> None:
        for att in self._attached.pop(job.id, []):
            self._push(att, protocol.PUSH_RESULT, job.result())
        if job.internal and job.gpu is not None and self.canaries.get(job.gpu) is job and not self.dispatcher.closed:
            log.warning("GPU %d canary ended (%s); restarting it in %g s", job.gpu, job.outcome, CANARY_RESTART_S)
            asyncio.get_running_loop().call_later(CANARY_RESTART_S, self._start_canary, job.gpu)

    def _start_canary(self, gpu: int) -> None:
        if self.telemetry is None or self.dispatcher.closed:
            return
        target = next(g for g in self.gpus if g.index == gpu)
        self.canaries[gpu] = self.dispatcher.start_internal(self.telemetry.canary_argv(target), gpu, "canary")

    def _push(self, att: Attachment, type_: str, body: Any) -> None:
        self._send(att.peer, protocol.push(type_, att.request_id, body))

    def _attach(self, peer: Peer, req: Request, job: Job) -> None:
        """Replay the output so far, then stream the rest (or the result at once)."""
        att = Attachment(peer, req.id, {s: codecs.getincrementaldecoder("utf-8")("replace") for s in ("stdout", "stderr")})
        for stream, path in (("stdout", job.stdout_path), ("stderr", job.stderr_path)):
            if path is not None and path.exists():
                text = att.decoders[stream].decode(path.read_bytes())
                if text:
                    self._push(att, protocol.PUSH_OUTPUT, {"id": job.id, "stream": stream, "data": text})
        if job.done.is_set():
            self._push(att, protocol.PUSH_RESULT, job.result())
        else:
            self._attached.setdefault(job.id, []).append(att)

    # --- handlers -------------------------------------------------------------

    async def _hello(self, peer: Peer, req: Request) -> Any:
        return {
            "protocol": protocol.VERSION,
            "node": self.state.node,
            "policy": self.config.runtime.policy,
            "read_only": peer.read_only,
            "telemetry": endpoints.telemetry(self.run_dir),
            "gpus": [self._gpu_record(g) for g in self.gpus],
        }

    async def _status(self, peer: Peer, req: Request) -> Any:
        d = self.dispatcher
        return {
            "node": self.state.node,
            "policy": self.config.runtime.policy,
            "pid": os.getpid(),
            "uptime_s": time.time() - self.state.started_at,
            "paused": d.paused_node,
            "stopping": d.closed,
            "queued": len(d.queue),
            "trace": str(self.trace_path),
            "trace_events_lost": self.trace.lost_total,
            "cgroups": str(self.cgroup_slice.path) if self.cgroup_slice else None,
            "regions": self.regions.describe() if self.regions else None,
            "totals": dict(self.state.totals),
            "gpus": [self._gpu_status(g, self.state.gpus[g.index]) for g in self.gpus],
        }

    def _gpu_status(self, gpu: Gpu, state: node_state.GpuState) -> dict[str, Any]:
        """One GPU for `status`: its record, and its figures from the node state
        (the reducer's, as every client sees them)."""
        return {
            **self._gpu_record(gpu),
            "running": sorted(state.running),
            "queued": state.queued,
            "paused": state.paused,
            "leased": gpu.index in self.dispatcher.leased_gpus,
            "region_holder": state.region_holder,
            "region_kind": state.region_kind,
            "region_since": state.region_since,
            "region_queue": len(state.region_queue),
            "frozen": list(state.frozen),
            "regions_granted": state.regions_granted,
            "last_region": dict(state.last_region),
            "pool": {k: v for k, v in state.pool.items() if k != "workers"},
        }

    async def _snapshot(self, peer: Peer, req: Request) -> Any:
        return self._snapshot_body()

    async def _submit(self, peer: Peer, req: Request) -> Any:
        job = self.dispatcher.submit(req.body)
        if req.body.attach:
            self._attach(peer, req, job)
        return {"id": job.id, "state": job.state}

    async def _wait(self, peer: Peer, req: Request) -> Any:
        job = self.dispatcher.find(req.body.id)
        if req.body.attach:
            self._attach(peer, req, job)
            return {"id": job.id, "state": job.state}
        await job.done.wait()
        return job.result()

    async def _cancel(self, peer: Peer, req: Request) -> Any:
        job = self.dispatcher.cancel(req.body.id)
        return {"id": job.id, "state": job.state}

    async def _pause(self, peer: Peer, req: Request) -> Any:
        self.dispatcher.pause(req.body.gpu)
        return {"paused": req.body.gpu if req.body.gpu is not None else "node"}

    async def _resume(self, peer: Peer, req: Request) -> Any:
        self.dispatcher.resume(req.body.gpu)
        return {"resumed": req.body.gpu if req.body.gpu is not None else "node"}

    async def _recycle(self, peer: Peer, req: Request) -> Any:
        gpu = req.body.gpu
        self.dispatcher.check_gpu(gpu)
        if self.pool is None:
            raise ProtocolError(ErrorCode.REFUSED, "this runtime has no context pool (pool.size_per_gpu = 0)")
        count = self.pool.recycle(gpu, req.body.now)
        return {"gpu": gpu, "now": req.body.now, "workers": count}

    async def _lease(self, peer: Peer, req: Request) -> Any:
        leases = self._leases_or_refuse()
        self.dispatcher.check_gpu(req.body.gpu)
        return await leases.lease(req.body.gpu, req.body.ttl_s)

    async def _release_lease(self, peer: Peer, req: Request) -> Any:
        leases = self._leases_or_refuse()
        self.dispatcher.check_gpu(req.body.gpu)
        return leases.release(req.body.gpu)

    async def _take_lease(self, job: Job) -> Any:
        return await self._leases_or_refuse().for_command(job)

    def _leases_or_refuse(self) -> LeaseDesk:
        if self.leases is None:
            raise ProtocolError(ErrorCode.REFUSED, f"leases need policy 'krex' (this runtime runs '{self.config.runtime.policy}')")
        return self.leases

    # --- tenants of regions -------------------------------------------------------

    def tenants_of(self, gpu: int) -> list[Tenant]:
        return [
            Tenant(j.tenant_id or 0, j.id, j.process.pid, j.cgroup)
            for j in self.dispatcher.running_on(gpu)
            if j.process is not None and j.process.pid is not None
        ]

    def identify(self, pid: int) -> TenantIdentity | None:
        """The running command a process belongs to, by the kernel's word, never
        by what the process claims: its environment names the command, and it
        must be inside that command's process tree (an environment is easily
        forged; a cgroup is joined only with write access to it)."""
        command_id = peers.command_id_of(pid)
        if self.pool is not None and self.pool.is_worker(command_id):
            # A context process is whichever pooled command it runs now.
            command_id = self.pool.job_of(command_id) or ""
        job = self.dispatcher.jobs.get(command_id)
        if job is None or job.state != "running" or job.gpu is None or job.tenant_id is None:
            return None
        root = job.process.pid if job.process is not None else None
        if root is None or not process_tree.contains(root, job.cgroup, pid):
            return None
        return TenantIdentity(job.tenant_id, job.id, job.gpu)

    def tenancy_of(self, pid: int) -> str:
        """Why process `pid` counts as a tenant of this runtime ("" when it does
        not): it, or an ancestor, is in a command cgroup, or was started as a
        command or context process of this runtime. A process that is gone
        cannot be told from a tenant and counts as one."""
        if not psutil.pid_exists(pid):
            return f"process {pid} has exited, so it cannot be told from a tenant"
        for member in peers.lineage(pid):
            whose = f"process {pid}" + (f" descends from process {member}, which" if member != pid else "")
            command_id = peers.command_id_of(member)
            if command_id in self.dispatcher.jobs or (self.pool is not None and self.pool.is_worker(command_id)):
                return f"{whose} belongs to {command_id}"
            if self.cgroup_slice is not None and self.cgroup_slice.holds(member):
                return f"{whose} runs in a command cgroup of this runtime"
        return ""

    def _refuse_tenants(self, peer: Peer, what: str) -> None:
        """Changing requests come from operators, never from tenants, even ones
        running as the runtime's own user."""
        if peer.remote:
            return  # a tcp client proved an authorized CURVE key
        creds = peer.credentials
        if creds is None:
            raise ProtocolError(
                ErrorCode.FORBIDDEN, f"'{what}' needs the sender's identity, and libzmq reports no ipc peer credentials here"
            )
        if self.tenant_user is not None and creds.uid == self.tenant_user.uid:
            why = f"process {creds.pid} runs as the tenants' user {self.tenant_user.name}"
        else:
            why = self.tenancy_of(creds.pid)
        if why:
            raise ProtocolError(ErrorCode.FORBIDDEN, f"'{what}' is forbidden to tenants of this runtime: {why}")

    def kill_command(self, command_id: str, reason: str) -> None:
        try:
            self.dispatcher.cancel(command_id, reason)
        except ProtocolError:
            pass

    async def _heartbeat(self) -> None:
        assert self.regions is not None
        while True:
            self.regions.manager.stamp_heartbeats()
            await asyncio.sleep(self.config.regions.heartbeat_interval_s)

    # --- control loop -----------------------------------------------------------

    async def _serve(self, sock: zmq.asyncio.Socket, read_only: bool, remote: bool = False) -> None:
        while True:
            frames = await sock.recv_multipart(copy=False)
            if len(frames) < 2:
                continue
            credentials = None if remote else peers.ipc_credentials(frames[-1])
            peer = Peer(sock, tuple(f.bytes for f in frames[:-1]), read_only, credentials, remote)
            # Each request runs on its own so a `wait` never blocks the socket.
            asyncio.create_task(self._handle(peer, frames[-1].bytes))

    async def _handle(self, peer: Peer, frame: bytes) -> None:
        req_id = None
        try:
            req = protocol.decode_request(frame, self.config.runtime.max_message_bytes)
            req_id = req.id
            if req.type in self.changing:
                if peer.read_only:
                    raise ProtocolError(ErrorCode.REFUSED, f"'{req.type}' is refused on the read-only control socket")
                self._refuse_tenants(peer, req.type)
            body = await self.handlers[req.type](peer, req)
            self._send(peer, protocol.reply_ok(req_id, body))
        except ProtocolError as exc:
            self._send(peer, protocol.reply_error(req_id or protocol.request_id_of(frame), exc.code, exc.reason))
        except Exception as exc:
            log.exception("request failed")
            self._send(peer, protocol.reply_error(req_id, ErrorCode.INTERNAL, f"internal error: {exc!r}"))

    def _send(self, peer: Peer, msg: dict[str, Any]) -> None:
        try:
            peer.socket.send_multipart([*peer.route, protocol.encode(msg)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # a peer that went away must not disturb the service
            log.debug("dropping a message to a departed peer: %s", exc)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.runtime.snapshot_interval_s)
            self.publish_snapshot()

    # --- run --------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        self._stop_reason = reason
        self._stop.set()

    async def run(self) -> None:
        try:
            self._prepare()
            self._bind()
        except Exception:
            self._release()
            raise
        self._open_trace()
        self.dispatcher = Dispatcher(
            self.config,
            self.gpus,
            self.emit,
            self.tenant_env,
            self.output_dir,
            self.cgroup_slice,
            self._on_output,
            self._on_finished,
            tenant_cores=self._tenant_cores,
            take_lease=self._take_lease if self.config.runtime.policy == "krex" else None,
            run_as=self.run_as,
        )
        if self.config.runtime.policy == "krex":
            self.regions = region_setup.build(
                self.config, self.run_dir, self.gpus, self.cgroup_slice, self.tenants_of, self.emit, self.kill_command
            )
            self._open_gates_to_tenants()
            self.leases = LeaseDesk(self.regions.manager, self.dispatcher, self.config.regions.lease_ttl_s)
            self.channel = RegionChannel(self.run_dir / REGION_SOCKET, self.regions.manager, self.identify, self.config.regions)
        self.telemetry = Telemetry(self.config, self.gpus, self.emit, self.regions.gates if self.regions else {})
        if self.regions is not None:
            for gpu_regions in self.regions.manager.gpus.values():
                gpu_regions.clock_probe = self.telemetry.clock_now
        if self.config.pool.size_per_gpu > 0:
            self.pool = ContextPool(
                self.config,
                self.gpus,
                self.emit,
                lambda worker_id, tenant_id, gpu: self.identity_env(worker_id, tenant_id, {}, gpu),
                self.cgroup_slice,
                self.dispatcher.new_tenant_id,
                self._tenant_cores,
                self.run_dir / "pool",
                self.dispatcher.pump,
                self.run_as,
            )
            self.dispatcher.pool = self.pool
        self.emit(
            events.RuntimeStarted(
                node=socket.gethostname(),
                policy=self.config.runtime.policy,
                pid=os.getpid(),
                keep_finished=self.config.runtime.snapshot_finished,
                gpus=[self._gpu_record(g) for g in self.gpus],
                cgroups=str(self.cgroup_slice.path) if self.cgroup_slice else None,
                regions=self.regions.describe() if self.regions else None,
                recovered=self.recovered,
            )
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
        tasks = [
            asyncio.create_task(self._serve(self.control, read_only=False)),
            asyncio.create_task(self._serve(self.control_ro, read_only=True)),
            asyncio.create_task(self._tick()),
        ]
        if self.remote_control is not None:
            tasks.append(asyncio.create_task(self._serve(self.remote_control, read_only=False, remote=True)))
        tasks.append(asyncio.create_task(self.telemetry.run()))
        if self.config.telemetry.canary:
            for gpu in self.gpus:
                self._start_canary(gpu.index)
        if self.regions is not None and self.channel is not None:
            self.regions.manager.start()
            await self.channel.start()
            access.open_to_tenants(self.run_dir / REGION_SOCKET, self.tenant_user, 0o660)
            tasks.append(asyncio.create_task(self._heartbeat()))
            described = self.regions.describe()
            log.info(
                "regions: gate backend %s, freezer %s, reserved cores %s%s",
                described["gate_backend"],
                described["freezer"],
                described["reserved_cores"],
                f" ({self.regions.cpus.note})" if self.regions.cpus.note else "",
            )
        log.info(
            "serving %d %sGPU(s) under policy '%s' at %s",
            len(self.gpus),
            "simulated " if self.gpus and self.gpus[0].simulated else "",
            self.config.runtime.policy,
            endpoints.control(self.run_dir),
        )
        log.info(
            "cgroups: %s",
            f"v{self.cgroup_slice.version} at {self.cgroup_slice.path}" if self.cgroup_slice else "none; using process groups",
        )
        if self.pool is not None:
            self.pool.start()
            log.info("context pool: %d per GPU, preloading %s", self.pool.size, list(self.config.pool.preload) or "nothing")
        try:
            await self._stop.wait()
            log.info("stopping (%s): %s running commands", self._stop_reason, self.config.runtime.on_shutdown)
            self.emit(events.RuntimeStopping(reason=self._stop_reason))
            self.dispatcher.closed = True
            if self.pool is not None:
                self.pool.stop_replacing()
            if self.regions is not None and self.channel is not None:
                await self.channel.close()
                await self.regions.manager.shutdown()
            await self.dispatcher.shutdown(self.config.runtime.on_shutdown, self.config.runtime.shutdown_grace_s)
            if self.pool is not None:
                await self.pool.shutdown()
            self.emit(events.RuntimeStopped())
        finally:
            for task in tasks:
                task.cancel()
            self._close()

    def _open_gates_to_tenants(self) -> None:
        assert self.regions is not None
        access.open_to_tenants(self.run_dir / region_setup.GATES_DIR, self.tenant_user, 0o710)
        for gpu in self.regions.gates:
            access.open_to_tenants(region_setup.gate_path(self.run_dir, gpu), self.tenant_user, 0o660)

    def _tenant_cores(self, gpu: int) -> tuple[int, ...]:
        return self.regions.cpus.tenant_cores(gpu) if self.regions is not None else ()

    def _close(self) -> None:
        self.trace.close()
        if self.telemetry is not None:
            self.telemetry.close()
        if self.regions is not None:
            for gpu, gate in self.regions.gates.items():
                gate.open_gate()
                gate.detach()
                region_setup.gate_path(self.run_dir, gpu).unlink(missing_ok=True)
        if self.authenticator is not None:
            self.authenticator.stop()
        for sock in (self.control, self.control_ro, self.pub, self.remote_control, self.remote_pub):
            if sock is not None:
                sock.close(linger=0)
        self.ctx.term()
        for name in (endpoints.CONTROL_SOCKET, endpoints.CONTROL_READ_ONLY_SOCKET, endpoints.TELEMETRY_SOCKET):
            (self.run_dir / name).unlink(missing_ok=True)
        if self.cgroup_slice is not None:
            self.cgroup_slice.remove()
        self._release()

    def _release(self) -> None:
        for c in self._claims:
            c.release()
        self._claims.clear()


def _bind_to(sock: zmq.asyncio.Socket, endpoint: str) -> None:
    """Bind, or stop the start-up with one line that names the endpoint (an ipc
    path too long for sun_path, a tcp address in use...)."""
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        raise StartupError(f"cannot serve on {endpoint}: {exc}") from None
