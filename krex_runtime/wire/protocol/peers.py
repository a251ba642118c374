"""Who is at the other end of a socket, by the kernel's word.

On an ipc connection libzmq reads the peer's SO_PEERCRED when it accepts it
and appends ":uid:gid:pid" to the message property "Peer-Address". The pid is
the process that connected; the runtime then looks at that process and its
ancestors (a tenant's child is a tenant too). On a tcp connection the client
proved a CURVE key, and the message property "User-Id" names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import zmq


@dataclass(frozen=True)
class Credentials:
    uid: int
    gid: int
    pid: int


def ipc_credentials(frame: zmq.Frame) -> Credentials | None:
    """The credentials of the ipc peer that sent `frame`, or None where libzmq
    does not report them (built without SO_PEERCRED)."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:
        return None
    parts = str(address).rsplit(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    uid, gid, pid = (int(p) for p in parts[1:])
    return Credentials(uid, gid, pid) if pid > 0 else None


def curve_user(frame: zmq.Frame) -> str:
    """The name the runtime's ZAP handler gave the tcp client that sent
    `frame` (its key file's, service/curve.py; "" where there is none)."""
    try:
        return str(frame.get("User-Id") or "")
    except zmq.ZMQError:
        return ""


def lineage(pid: int) -> Iterator[int]:
    """The process, then its parent, grandparent... up to (not including) init."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        yield pid
        pid = parent_of(pid)


def parent_of(pid: int) -> int:
    """The parent's pid (0 when the process is gone), from /proc/<pid>/stat:
    the fourth field, counted after the command name, which may hold spaces."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return 0
    return int(text[text.rindex(b")") + 2 :].split()[1])


def command_id_of(pid: int) -> str:
    """KREX_COMMAND_ID from the environment the process was started with
    ("" when it has none or cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return ""
    return env.get(b"KREX_COMMAND_ID", b"").decode(errors="replace")
