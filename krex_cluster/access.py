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
from dataclasses import dataclass
from typing import Iterator

import zmq

COMMAND_ENV = b"KREX_COMMAND_ID"  # what a runtime puts in every command's (and context process's) environment


@dataclass(frozen=True)
class Credentials:
    uid: int
    gid: int
    pid: int


def ipc_credentials(frame: zmq.Frame) -> Credentials | None:
    """The ipc sender's credentials (libzmq appends ':uid:gid:pid' to Peer-Address)."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:
        return None
    parts = str(address).rsplit(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    uid, gid, pid = (int(p) for p in parts[1:])
    return Credentials(uid, gid, pid) if pid > 0 else None


def tenancy_of(pid: int) -> str:
    """Why process `pid` counts as a tenant of a KREX runtime ("" when it does not)."""
    if not os.path.exists(f"/proc/{pid}"):
        return f"process {pid} has exited, so it cannot be told from a tenant"
    for member in _lineage(pid):
        command = _command_of(member)
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


def _lineage(pid: int) -> Iterator[int]:
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        yield pid
        pid = _parent_of(pid)


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return 0
    return int(text[text.rindex(b")") + 2 :].split()[1])


def _command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return ""
    return env.get(COMMAND_ENV, b"").decode(errors="replace")
