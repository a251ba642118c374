"""The main of a zygote: the per-GPU parent of forked-mode commands.

The runtime starts this module (`python -P -m krex_runtime.tenant.zygote
SPEC`) like a context process: its GPU's tenant environment (the interception
library preloaded), a cgroup of its own, its cores and user, a control socket
inherited as a file descriptor. It imports the configured modules once,
checking after each that it may still fork safely (tenant/fork_safety.py:
single-threaded, CUDA driver not initialised), reports `ready`, then forks one
child per `fork` message. It never touches CUDA and never runs a command
itself; each child is a fresh process that creates its own context
(tenant/forked_child.py).

Control messages are JSON lines:
    zygote -> runtime:  {"type": "ready", "import_s", "modules"}
                        {"type": "failed", "reason"}                (start-up)
    runtime -> zygote:  {"type": "fork", "id", "entry", "cwd", "env"}
                        + 3 fds: the command's stdout and stderr (write ends
                        of the runtime's pipes) and the read end of its go pipe
    zygote -> runtime:  {"type": "forked", "id", "pid"}
                        {"type": "fork_failed", "id", "reason"}
                        {"type": "exited", "id", "pid", "status"}   (the raw wait status)

The child is the zygote's child, so the zygote reaps it (a pidfd per child
in one poll loop: no signal handler, no thread) and reports its wait status;
the runtime turns it into the command's exit code or signal as it does for a
process it started itself. The runtime places the child in the command's
cgroup and then writes to the go pipe; the child runs nothing of the command
before that.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import socket
import sys
import time
import traceback
from typing import Any

from krex_runtime.tenant import fork_safety
from krex_runtime.tenant.forked_child import run_child


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall(json.dumps(msg).encode() + b"\n")


def preload(modules: list[str]) -> None:
    """Import each module, then check that the process may still fork."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise RuntimeError(f"importing {name!r} failed: {type(exc).__name__}: {exc}") from exc
        fork_safety.check(name)


class Zygote:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.poll = select.poll()
        self.poll.register(sock.fileno(), select.POLLIN)
        self.children: dict[int, tuple[str, int]] = {}  # pidfd -> (command id, pid)
        # Several fork messages may be on their way at once: bytes are split
        # into lines here, and each message's 3 descriptors, which travel with
        # its first bytes, are taken in the order they came.
        self.buf = bytearray()
        self.fds: list[int] = []

    def own_fds(self) -> list[int]:
        """What a child must not keep: the zygote's channel and its other children's pidfds."""
        return [self.sock.fileno(), *self.children]

    def serve(self) -> None:
        while True:
            for fd, _events in self.poll.poll():
                if fd == self.sock.fileno():
                    self.read()
                else:
                    self.reap(fd)

    def read(self) -> None:
        data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, 16)
        if not data:
            os._exit(0)  # the runtime is gone; the children are in its cgroups
        self.buf += data
        self.fds += fds
        while (end := self.buf.find(b"\n")) >= 0:
            line = bytes(self.buf[:end])
            del self.buf[: end + 1]
            mine, self.fds = self.fds[:3], self.fds[3:]
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {}
            self.handle(msg, mine)

    def handle(self, msg: dict[str, Any], fds: list[int]) -> None:
        if msg.get("type") != "fork" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            _send(self.sock, {"type": "fork_failed", "id": msg.get("id"), "reason": "bad fork message"})
            return
        # Whatever the zygote's own streams hold is written once, by the zygote.
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            _send(self.sock, {"type": "fork_failed", "id": msg["id"], "reason": f"fork failed: {exc.strerror}"})
            return
        if pid == 0:
            try:
                run_child(msg, fds, self.own_fds())
            finally:
                os._exit(70)  # never back into the zygote's loop
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (msg["id"], pid)
        self.poll.register(pidfd, select.POLLIN)
        _send(self.sock, {"type": "forked", "id": msg["id"], "pid": pid})

    def reap(self, pidfd: int) -> None:
        command_id, pid = self.children.pop(pidfd)
        self.poll.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        _send(self.sock, {"type": "exited", "id": command_id, "pid": pid, "status": status})


def main() -> None:
    spec = json.loads(sys.argv[1])
    sock = socket.socket(fileno=spec["control_fd"])
    sock.setblocking(True)
    t0 = time.monotonic()
    try:
        preload(list(spec["preload"]))
    except fork_safety.UnsafePreload as exc:
        _send(sock, {"type": "failed", "reason": f"unsafe preload: {exc}"})
        os._exit(1)
    except BaseException as exc:
        traceback.print_exc()
        _send(sock, {"type": "failed", "reason": str(exc)})
        os._exit(1)
    # What the imports made lives as long as the process: kept out of the
    # collector's reach, a child's collections do not touch (and so copy) its pages.
    gc.collect()
    gc.freeze()
    _send(sock, {"type": "ready", "import_s": time.monotonic() - t0, "modules": list(spec["preload"])})
    Zygote(sock).serve()


if __name__ == "__main__":
    main()
