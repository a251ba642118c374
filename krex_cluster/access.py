"""Who may change the cluster: the same rule as one node (docs/protocol.md,
"Tenants may not change anything"), by the kernel's word.

On the gateway's ipc socket libzmq reports the sender's SO_PEERCRED; a
process that is, or descends from, a command or context process of any KREX
runtime (the environment a runtime starts them with names their command) is
a tenant, and so is one that has exited (it can no longer be told from one).
A tcp client has proved an authorized CURVE key: an operator. The gateway's
control socket itself is the operators' only (owner, or `gateway.access_group`).
"""

from __future__ import annotations

import os

from krex_runtime.wire.protocol.peers import Credentials, command_id_of, ipc_credentials, lineage

__all__ = ["Credentials", "Peer", "ipc_credentials", "refusal", "tenancy_of"]


class Peer:
    """Who sent a request: its route on the control socket and, on ipc, the kernel's word."""

    def __init__(self, route: tuple[bytes, ...], credentials: Credentials | None, remote: bool) -> None:
        self.route, self.credentials, self.remote = route, credentials, remote


def tenancy_of(pid: int) -> str:
    """Why process `pid` counts as a tenant of a KREX runtime ("" when it does not)."""
    if not os.path.exists(f"/proc/{pid}"):
        return f"process {pid} has exited, so it cannot be told from a tenant"
    for member in lineage(pid):
        command = command_id_of(member)
        if command:
            whose = f"process {pid}" + (f" descends from process {member}, which" if member != pid else "")
            return f"{whose} belongs to {command}"
    return ""


def refusal(verb: str, credentials: Credentials | None, remote: bool) -> str:
    """Why `verb` is refused to this sender ("" when it is not)."""
    if remote:
        return ""
    if credentials is None:
        return f"'{verb}' needs the sender's identity, and libzmq reports no ipc peer credentials here"
    why = tenancy_of(credentials.pid)
    return f"'{verb}' is forbidden to tenants of this cluster: {why}" if why else ""
