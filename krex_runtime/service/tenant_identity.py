"""Who is a tenant: which running command a process belongs to (for the
region channel), and whether the sender of a changing request is a tenant of
this runtime (refused: changes come from operators only).

Always by the kernel's word, never by what a process claims: its environment
names its command, and it must be inside that command's process tree (an
environment is easily forged; a cgroup is joined only with write access to it).
"""

from __future__ import annotations

import psutil

from krex_runtime.commands.dispatcher import Dispatcher
from krex_runtime.commands.pools import NodePools
from krex_runtime.host import process_tree
from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.node.access import TenantUser
from krex_runtime.regions.channel import TenantIdentity
from krex_runtime.service.server import Peer
from krex_runtime.wire.protocol import peers
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError


class Tenancy:
    def __init__(
        self, dispatcher: Dispatcher, pools: NodePools, cgroup_slice: CgroupSlice | None, tenant_user: TenantUser | None,
    ) -> None:
        self._dispatcher = dispatcher
        self._pools = pools  # their word on the processes they started
        self._slice = cgroup_slice
        self._tenant_user = tenant_user

    def identify(self, pid: int) -> TenantIdentity | None:
        """The running command process `pid` belongs to (None: none of ours)."""
        if self._pools.acts_for_commands(pid):
            return self._served_by(self._pools.command_of(pid, ""))
        # A context process is whichever pooled command it runs now; a forked
        # child, which keeps its zygote's environment, the one whose tree holds it.
        command_id = self._pools.command_of(pid, peers.command_id_of(pid))
        job = self._dispatcher.jobs.get(command_id)
        if job is None or job.state != "running" or job.gpu is None or job.tenant_id is None:
            return None
        root = job.process.pid if job.process is not None else None
        if root is None or not process_tree.contains(root, job.cgroup, pid):
            return None
        return TenantIdentity(job.tenant_id, job.id, job.gpu, tuple(g.index for g in job.gpu_set))

    def acts_for_commands(self, pid: int) -> bool:
        """A context server of forwarded mode: the command it acts for changes."""
        return self._pools.acts_for_commands(pid)

    def _served_by(self, command_id: str) -> TenantIdentity | None:
        """A context server of forwarded mode acts for the command it serves
        (the GPU names the server's pid for that command's work). Which
        command is the pool's word, by the server's pid."""
        job = self._dispatcher.jobs.get(command_id)
        if job is None or job.state != "running" or job.gpu is None or job.tenant_id is None:
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
            if command_id in self._dispatcher.jobs or self._pools.started(member, command_id):
                return f"{whose} belongs to {command_id}"
            if self._slice is not None and self._slice.holds(member):
                return f"{whose} runs in a command cgroup of this runtime"
        return ""

    def refuse_tenants(self, peer: Peer, what: str) -> None:
        """Changing requests come from operators, never from tenants, even ones
        running as the runtime's own user."""
        if peer.remote:
            return  # a tcp client proved an authorized CURVE key
        creds = peer.credentials
        if creds is None:
            raise ProtocolError(
                ErrorCode.FORBIDDEN, f"'{what}' needs the sender's identity, and libzmq reports no ipc peer credentials here"
            )
        if self._tenant_user is not None and self._tenant_user.owns(creds.uid):
            why = f"process {creds.pid} runs as uid {creds.uid}, a tenant's ({self._tenant_user.name})"
        else:
            why = self.tenancy_of(creds.pid)
        if why:
            raise ProtocolError(ErrorCode.FORBIDDEN, f"'{what}' is forbidden to tenants of this runtime: {why}")
