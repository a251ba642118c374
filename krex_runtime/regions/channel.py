"""The region channel: a Unix socket on which tenants ask for their GPU alone.

One connection per tenant process, one ASCII line per message (docs/native.md,
"Region channel"; the C client is native/src/intercept/region_api.c, the Python one
krex_runtime/tenant/region.py; both speak krex_runtime/region_wire.py, the
version they name its PROTOCOL):

    HELLO <version> <tenant_id> <pid> <token>
                                       ->  OK | ERROR <errno name> <reason>
    ENTER <tid> [<settle_ms>]          ->  GRANTED <seq> [<flags>] | ERROR ...
    EXIT [integrity=<counts> [timing=<summary>]] [harness=<name>]...
                                       ->  RELEASED <seq> [<exit flags>] [<integrity words>] | ERROR ...
    VERDICT                            ->  VERDICT <seq> <verdict> <reason> | <reason>... | ERROR ...

A command placed on a set of GPUs asks in the same words: its ENTER is
answered GRANTED once every GPU of its set is held, under one region id, and
its EXIT releases them all (regions/gpu_sets.py); VERDICT gives the set's
verdict, the worst of its GPUs', each reason prefixed by its GPU.

Who a peer is comes from the kernel (SO_PEERCRED), not from what it claims:
its pid must be the one it names and belong to the process tree of a running
command (`identify`), whose tenant id it must name and whose token
(krex_runtime/regions/tokens.py) it must show. A connection only ever acts on
its own request, and a process has at most one request, queued or held,
across all its connections. A connection that closes while waiting or
holding withdraws or releases its request. A request belongs to the process
that connected (the kernel's pid), not to whoever holds the socket: when that
process dies (a pidfd says so at once) the connection is closed and its
request released, even if a child it forked keeps the socket open.

What a peer can cost is bounded: a line is at most MAX_LINE bytes of ASCII;
the HELLO must come within `regions.channel_hello_timeout_s`; a connection
that neither holds nor awaits a region and sends nothing for
`regions.channel_idle_timeout_s` is closed (clients open a new one at their
next region); a connection may send `regions.channel_max_messages_per_s`
lines a second. Connections are capped per tenant (a running command, known
from the kernel's word on the connecting process as it connects), per uid
for processes that are no tenant, and in total, except that a tenant's first
connection is always accepted: tenants that share a uid cannot deny each
other the channel. Past a bound the peer gets an ERROR line that says which,
and (except for the first message over the rate) is disconnected, which
gives back whatever it held. A peer that leaves its replies unread for
SEND_TIMEOUT_S is disconnected too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krex_runtime import region_wire
from krex_runtime.node.config import RegionSection
from krex_runtime.region_wire import HELLO_USAGE, MAX_LINE, PROTOCOL
from krex_runtime.regions.certificate import Witness
from krex_runtime.regions.channel_peers import (
    RateLimit,
    Refusal,
    peer_credentials,
    read_line,
    send,
    try_send,
    watch_requester,
)
from krex_runtime.regions.entry import cpu_slices
from krex_runtime.regions.gpu_sets import RegionSet
from krex_runtime.regions.region_manager import RegionManager
from krex_runtime.regions.requests import RegionRefused, Request
from krex_runtime.regions.tokens import RegionTokens

log = logging.getLogger("krex.region_channel")

VERDICT_WAIT_S = 30.0  # a release takes its exit steps (thaw, reopen) before the verdict is in


@dataclass(frozen=True)
class TenantIdentity:
    tenant_id: int
    command_id: str
    gpu: int
    gpus: tuple[int, ...] = ()  # placed on a set of GPUs: its regions cover them all (gpu_sets.py)


Identify = Callable[[int], TenantIdentity | None]


@dataclass(eq=False)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pid: int
    uid: int
    rate: RateLimit
    bucket: tuple[str, int | str] = ("uid", -1)  # what its connections are counted by: its tenant, else its uid
    who: TenantIdentity | None = None
    req: Request | RegionSet | None = None  # its request, from ENTER until it is released or ends ungranted
    released: Request | RegionSet | None = None  # the last one it released: VERDICT tells its certificate
    ended: str = ""  # why the runtime ended it (its requester died), for the release's reason
    # A region inside its own lease: the witnesses read at its grant, then, at its release, its verdict
    # (told at once; the lease's own certificate comes when the lease ends).
    in_lease: Witness | bool | None = False
    lease_verdict: tuple[str, list[str]] | None = None


class RegionChannel:
    def __init__(
        self, path: Path, manager: RegionManager, identify: Identify, settings: RegionSection, tokens: RegionTokens
    ) -> None:
        self.path = path
        self.manager = manager
        self.tokens = tokens
        self._identify = identify
        self._settings = settings
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[Connection] = set()

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)
        # Created under the runtime's umask (027); the service then opens it to
        # the tenants' user alone (access.open_to_tenants). Tokens guard the rest.
        self._server = await asyncio.start_unix_server(self._serve_client, path=str(self.path), limit=MAX_LINE)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.path.unlink(missing_ok=True)

    # --- one connection ---------------------------------------------------------------

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pid, uid = peer_credentials(writer)
        conn = Connection(reader, writer, pid, uid, RateLimit(self._settings.channel_max_messages_per_s))
        try:
            # Counted by the tenant the kernel says the process belongs to (the
            # HELLO checks the rest), so that one tenant's connections never
            # use up what other tenants of the same uid need.
            known = self._identify(pid) if pid > 0 else None
            conn.bucket = ("tenant", known.command_id) if known is not None else ("uid", uid)
            crowded = self._crowded(conn.bucket)
            if crowded:
                raise Refusal("EAGAIN", crowded)
            self._connections.add(conn)
            conn.who = await self._hello(conn)
            watch = watch_requester(conn)
            await send(writer, "OK")
            try:
                while await self._serve_message(conn):
                    pass
            finally:
                watch()
        except Refusal as exc:
            await try_send(writer, f"ERROR {exc.code} {exc.reason}")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:  # a bug in one connection must not take the channel down
            log.exception("region channel: connection of pid %d failed", pid)
        finally:
            self._connections.discard(conn)
            req, conn.req = conn.req, None
            if req is not None and req.kind == "region":
                self.manager.withdraw(req, conn.ended or "tenant disconnected")
            writer.close()

    def _crowded(self, bucket: tuple[str, int | str]) -> str:
        """Why one more connection counted in `bucket` is refused ("" if it is not)."""
        settings = self._settings
        total = settings.channel_max_connections
        mine = sum(1 for c in self._connections if c.bucket == bucket)
        kind, who = bucket
        if kind == "tenant":
            if mine >= settings.channel_max_connections_per_tenant:
                return f"command {who} has its limit of {settings.channel_max_connections_per_tenant} region channel connections"
            if mine == 0:
                return ""  # a tenant's first connection: never crowded out by others
        elif mine >= settings.channel_max_connections_per_uid:
            return f"uid {who} has its limit of {settings.channel_max_connections_per_uid} region channel connections"
        if len(self._connections) >= total:
            return f"the region channel has its limit of {total} connections"
        return ""

    async def _hello(self, conn: Connection) -> TenantIdentity:
        timeout_s = self._settings.channel_hello_timeout_s
        try:
            line = await asyncio.wait_for(read_line(conn.reader), timeout_s)
        except TimeoutError:
            raise Refusal("ETIMEDOUT", f"no HELLO line within {timeout_s:g} s") from None
        if line is None:
            raise ConnectionResetError
        parts = line.split()
        if len(parts) < 2 or parts[0] != "HELLO":
            raise Refusal("EPROTO", f"expected {HELLO_USAGE}")
        if parts[1] != str(PROTOCOL):
            raise Refusal(
                "EPROTO",
                f"region protocol {parts[1][:16]!r} is not supported: this runtime speaks {PROTOCOL}; "
                "use the client (libkrex.so, krex_runtime.client) of the same KREX version",
            )
        if len(parts) != 5:
            raise Refusal("EPROTO", f"expected {HELLO_USAGE}")
        _, _, tenant, claimed_pid, token = parts
        try:
            who = self._authenticate(conn.pid, tenant, claimed_pid, token)
        except Refusal as exc:
            log.warning("region channel: refused pid %d (uid %d): %s", conn.pid, conn.uid, exc.reason)
            raise
        return who

    def _authenticate(self, pid: int, tenant: str, claimed_pid: str, token: str) -> TenantIdentity:
        """The tenant `pid` is, if it names that tenant and shows its token. The reasons
        quote what the peer sent only once it is known to be a number (they are
        logged), and never the token."""
        if not (claimed_pid + tenant).isascii() or not claimed_pid.isdigit() or not tenant.lstrip("-").isdigit():
            raise Refusal("EPROTO", f"expected {HELLO_USAGE}, the pid and tenant id as numbers")
        if claimed_pid != str(pid):
            raise Refusal("EPERM", f"the pid in HELLO ({claimed_pid[:16]}) is not the connecting process ({pid})")
        who = self._identify(pid)
        if who is None:
            raise Refusal("EPERM", f"pid {pid} is not a process of a command running under this runtime")
        if tenant != str(who.tenant_id):
            raise Refusal("EPERM", f"pid {pid} is not a process of tenant {tenant[:16]}")
        if not self.tokens.matches(who.tenant_id, token):
            raise Refusal("EPERM", f"wrong region token for tenant {who.tenant_id} (the runtime passes it in KREX_REGION_TOKEN)")
        return who

    async def _serve_message(self, conn: Connection) -> bool:
        """Answers one message; False when the peer has gone."""
        if conn.req is None:  # holding, it is bounded by the hold limit instead
            idle_s = self._settings.channel_idle_timeout_s
            try:
                line = await asyncio.wait_for(read_line(conn.reader), idle_s)
            except TimeoutError:
                raise Refusal("ETIMEDOUT", f"idle for {idle_s:g} s: disconnecting") from None
        else:
            line = await read_line(conn.reader)
        if line is None:
            return False
        if not conn.rate.allow():
            limit = f"rate limit of {conn.rate.per_s} messages/s"
            if conn.rate.refused > 1:
                raise Refusal("EAGAIN", f"{limit} exceeded again: disconnecting")
            await send(conn.writer, f"ERROR EAGAIN {limit} exceeded: message ignored, slow down")
            return True
        word, _, arg = line.partition(" ")
        if word == "ENTER":
            return await self._on_enter(conn, arg)
        if word == "EXIT":
            await self._on_exit(conn, arg)
        elif word == "VERDICT":
            await self._on_verdict(conn)
        elif not word:
            await send(conn.writer, "ERROR EPROTO empty line")
        else:
            await send(conn.writer, f"ERROR EPROTO unknown message {word[:32]!r}")
        return True

    async def _on_enter(self, conn: Connection, arg: str) -> bool:
        assert conn.who is not None
        if conn.req is not None:
            await send(conn.writer, "ERROR EBUSY this connection already holds or awaits its region")
            return True
        tid, _, settle_ms = arg.partition(" ")
        # str.isdigit alone takes digits int() cannot read.
        if not (tid.isascii() and tid.isdigit()) or (settle_ms and not (settle_ms.isascii() and settle_ms.isdigit())):
            await send(conn.writer, "ERROR EINVAL ENTER needs a thread id (and optionally a settle bound in ms)")
            return True
        settle_s = int(settle_ms[:8]) / 1000 if settle_ms else None
        if settle_s is not None and settle_s > self._settings.settle_cap_s:
            cap = self._settings.settle_cap_s
            await send(conn.writer, f"ERROR EINVAL a settle of {settle_s:g} s is over this node's regions.settle_cap_s ({cap:g} s)")
            return True
        if int(tid) and not cpu_slices.is_thread_of(conn.pid, int(tid)):
            # The runtime pins that thread: it must be the requester's own.
            await send(conn.writer, f"ERROR EINVAL thread {tid[:16]} is not a thread of process {conn.pid}")
            return True
        if any(c.req is not None and c.pid == conn.pid for c in self._connections):
            # Two requests of one process would queue behind each other: the
            # second could only be granted once the first is released.
            await send(conn.writer, f"ERROR EBUSY process {conn.pid} already holds or awaits a region on another connection")
            return True
        if self._identify(conn.pid) != conn.who:
            # A context process outlives its commands: the connection is the ended one's.
            raise Refusal("EPERM", f"command {conn.who.command_id}, for which this connection was opened, is no longer running")
        return await self._enter(conn, int(tid), settle_s)

    async def _on_exit(self, conn: Connection, arg: str = "") -> None:
        assert conn.who is not None
        req, conn.req = conn.req, None
        if req is None:
            await send(conn.writer, "ERROR EINVAL this connection holds no region")
            return
        conn.released = req
        if isinstance(req, Request) and req.kind != "region" and conn.in_lease is not False:
            witness = conn.in_lease if isinstance(conn.in_lease, Witness) else None
            verdict, reasons = self.manager.certify_in_lease(req, witness)
            conn.lease_verdict = verdict, [f"lease: inside lease {req.seq} of this command", *reasons]
            conn.in_lease = False
        # What the tenant's library saw of its timed windows (docs/integrity.md),
        # into the certificate the release makes.
        counts, patched, timing = region_wire.parse_exit(arg)
        staged = region_wire.parse_staged(arg)  # forwarded mode's staged copies inside the region
        said = ""  # the words the record was made of, echoed in RELEASED
        if req.kind == "region":  # inside a lease a region is a no-op: the lease's record stays none
            req.integrity = region_wire.record(counts, patched, timing, staged)
            said = region_wire.words(",".join(str(counts[k]) for k in region_wire.COUNTS) if counts else None, patched,
                                     region_wire.timing_text(timing) if timing else None, staged)
        if req.kind == "region":
            self.manager.release(req, "released")
        if req.revoked:
            await send(conn.writer, f"ERROR ETIMEDOUT {req.reason}")
        else:
            exit_flags = ",".join((req.exit_clock or {}).get("flags") or [])  # the clock at the release
            await send(conn.writer, f"RELEASED {req.seq} {exit_flags} {said}".rstrip())

    async def _on_verdict(self, conn: Connection) -> None:
        """The exclusivity certificate of the connection's last released region,
        once the release has made it (regions/certificate.py)."""
        req = conn.released
        if req is None:
            await send(conn.writer, "ERROR EINVAL this connection has released no region")
            return
        if req.kind != "region" and conn.lease_verdict is not None:
            verdict, reasons = conn.lease_verdict  # a region inside a lease: certified at its release
        else:
            try:
                await asyncio.wait_for(req.certified.wait(), VERDICT_WAIT_S)
            except TimeoutError:
                await send(conn.writer, f"ERROR ETIMEDOUT region {req.seq} has no verdict yet")
                return
            verdict, reasons = req.verdict
        text = " | ".join(r.replace("|", "/") for r in reasons)
        await send(conn.writer, f"VERDICT {req.seq} {verdict} {text}")  # long reasons cut: the trace has them whole

    async def _enter(self, conn: Connection, tid: int, settle_s: float | None) -> bool:
        """Queues the request and answers when it is granted or refused; False when the peer has gone."""
        assert conn.who is not None
        who, writer = conn.who, conn.writer
        lease = self.manager.leased_to(who.gpu, who.tenant_id)
        if lease is not None:  # inside its own lease a region is a no-op
            conn.req = lease
            conn.in_lease = self.manager.witness_in_lease(lease, conn.pid, tid)
            await send(writer, f"GRANTED {lease.seq}")
            return True
        req = conn.req = self.manager.new_request(
            who.gpu, "region", who.tenant_id, who.command_id, conn.pid, tid, self._settings.hold_limit_s, settle_s,
            gpus=who.gpus,
        )
        # While waiting, the only thing the peer may do is go away.
        gone = asyncio.create_task(conn.reader.read(1))
        try:
            waiting: set[asyncio.Future[Any]] = {req.granted, gone}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            gone.cancel()
            raise
        if req.granted not in done:
            conn.req = None
            if gone.exception() is None and gone.result():
                self.manager.withdraw(req, "tenant sent a message while waiting")
                raise Refusal("EPROTO", "nothing may be sent while ENTER waits: request withdrawn")
            self.manager.withdraw(req, conn.ended or "tenant disconnected while waiting")
            return False
        gone.cancel()
        # The reader allows one waiter: let the cancelled read finish leaving.
        await asyncio.wait({gone})
        try:
            req.granted.result()
        except RegionRefused as exc:
            conn.req = None
            await send(writer, f"ERROR {exc.code} {exc.reason}")
            return True
        flags = ",".join(req.flags)
        await send(writer, f"GRANTED {req.seq} {flags}".rstrip())
        return True
