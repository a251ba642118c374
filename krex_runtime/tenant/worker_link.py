"""The private line between the runtime and a process it starts to serve
commands: a context process (pooled mode) or a zygote (forked mode).

The runtime hands the process one end of a socket pair as its stdin; nothing
about the line is on its command line or in its environment. The first line
the runtime writes is `hello`: the process's spec and a fresh 256-bit key.
The process moves the socket off fd 0 (to a close-on-exec descriptor, with
/dev/null in its place), then signs every line it writes:

    <hmac-sha256 hex> <json>\\n

The MAC covers the line's sequence number (0, 1, 2, ... per process) and its
JSON, so a line can be neither made up nor replayed. Lines from the runtime
are not signed: nothing but the runtime holds the other end.

Why: a pooled command runs inside its context process, with that process's
descriptors. A line it writes on the socket (`{"type": "done"}`) is refused
by the runtime, which then replaces the process (commands/pooled/pooled_worker.py);
so is every line that is not one of the messages below, whole and well
typed, in the order the process's state allows. The key is in the process's
memory while a command runs: code that goes looking for it there (gc,
ctypes) can still sign. What stops a command that does is the same as
what stops one that patches the interpreter's memory: nothing in-process
(docs/modes.md, "Limits"). Forked children close the socket and wipe the key
before anything of their command runs.

Standard library only, like all tenant-side code.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import socket
from typing import Any

KEY_BYTES = 32
MAC_HEX = 64

# Messages a process may send, each with its fields and their types (a None
# in a tuple: the field may be null). Anything else, a field missing or of
# another type included, is refused.
_NUM = (int, float)
_INT_OR_NONE = (int, type(None))
CONTEXT_MESSAGES: dict[str, dict[str, tuple[type, ...]]] = {
    "imported": {"import_s": _NUM},
    "ready": {"startup_s": _NUM, "context": (str,)},
    "failed": {"reason": (str,)},
    "done": {"state": (str,), "exit_code": _INT_OR_NONE, "signal": _INT_OR_NONE, "reason": (str,)},
    "clean": {"ok": (bool,), "cause": (str,), "reason": (str,), "clean_s": _NUM},
}
DONE_STATES = frozenset({"finished", "failed"})
ZYGOTE_MESSAGES: dict[str, dict[str, tuple[type, ...]]] = {
    "ready": {"import_s": _NUM, "modules": (list,)},
    "failed": {"reason": (str,)},
    "forked": {"id": (str,), "pid": (int,)},
    "fork_failed": {"id": (str, type(None)), "reason": (str,)},
    "exited": {"id": (str,), "pid": (int,), "status": (int,)},
}


class LinkError(ValueError):
    """A line that is not the process's own, or not a message it may send."""


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def hello(key: bytes, spec: dict[str, Any]) -> bytes:
    """The runtime's first line to the process."""
    return json.dumps({"type": "hello", "key": key.hex(), "spec": spec}).encode() + b"\n"


def _mac(key: bytes | bytearray, seq: int, body: bytes) -> str:
    return hmac.new(bytes(key), seq.to_bytes(8, "big") + body, hashlib.sha256).hexdigest()


class Verifier:
    """The runtime's side: checks each line a process sent, in order."""

    def __init__(self, key: bytes, messages: dict[str, dict[str, tuple[type, ...]]]) -> None:
        self._key = key
        self._seq = 0
        self._messages = messages

    def check(self, line: bytes) -> dict[str, Any]:
        """The message a line carries; LinkError when it is not the process's own."""
        mac, sep, body = line.rstrip(b"\n").partition(b" ")
        if not sep or len(mac) != MAC_HEX:
            raise LinkError(f"an unsigned line: {line[:80]!r}")
        if not hmac.compare_digest(mac, _mac(self._key, self._seq, body).encode()):
            raise LinkError(f"a line with a wrong signature: {body[:80]!r}")
        self._seq += 1
        try:
            msg: dict[str, Any] = json.loads(body)
        except ValueError:
            raise LinkError(f"a signed line that is not JSON: {body[:80]!r}") from None
        why = malformed(msg, self._messages)
        if why:
            raise LinkError(why)
        return msg


def malformed(msg: Any, messages: dict[str, dict[str, tuple[type, ...]]]) -> str:
    """Why `msg` is not one of `messages` ("" when it is)."""
    if not isinstance(msg, dict):
        return f"a message that is not an object: {str(msg)[:80]!r}"
    kind = msg.get("type")
    fields = messages.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return f"an unknown message type {str(kind)[:40]!r}"
    for name, types in fields.items():
        if name not in msg:
            return f"a {kind!r} message without {name!r}"
        value = msg[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"a {kind!r} message whose {name!r} is {type(value).__name__}"
    if kind == "done" and msg["state"] not in DONE_STATES:
        return f"a 'done' message with state {str(msg['state'])[:40]!r}"
    return ""


class Link:
    """The process's side: its end of the socket, reading plain lines and writing signed ones."""

    def __init__(self, sock: socket.socket, key: bytes) -> None:
        self.sock = sock
        self._key = bytearray(key)
        self._seq = 0
        self._buf = bytearray()
        self._fds: list[int] = []

    @classmethod
    def from_stdin(cls) -> tuple[Link, dict[str, Any]]:
        """Take the socket the runtime passed as stdin, and its hello: (link, spec)."""
        fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sock = socket.socket(fileno=fd)
        sock.setblocking(True)
        link = cls(sock, b"")
        msg, _fds = link.receive(take=0)
        if msg is None or msg.get("type") != "hello":
            raise RuntimeError("the runtime's hello did not come")
        link._key[:] = bytes.fromhex(msg["key"])
        return link, msg["spec"]

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: dict[str, Any]) -> None:
        body = json.dumps(msg).encode()
        line = _mac(self._key, self._seq, body).encode() + b" " + body + b"\n"
        self._seq += 1
        self.sock.sendall(line)

    def receive(self, take: int) -> tuple[dict[str, Any] | None, list[int]]:
        """The next line and up to `take` of the descriptors that came with the
        lines so far, in order (None and all that are left at EOF). A line that
        is not a JSON object reads as {} (the caller refuses it)."""
        while (end := self._buf.find(b"\n")) < 0:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, 16)
            self._fds.extend(fds)
            if not data:
                return None, self._take_fds(len(self._fds))
            self._buf += data
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        try:
            msg = json.loads(line)
        except ValueError:
            msg = {}
        return (msg if isinstance(msg, dict) else {}), self._take_fds(take)

    def _take_fds(self, n: int) -> list[int]:
        mine, self._fds = self._fds[:n], self._fds[n:]
        return mine

    def pending(self) -> bool:
        """Whether a whole line is already read and waiting."""
        return b"\n" in self._buf

    def forget(self) -> None:
        """A forked child's: wipe the key and close the socket before its command runs."""
        self._key[:] = bytes(len(self._key))
        try:
            self.sock.close()
        except OSError:
            pass
