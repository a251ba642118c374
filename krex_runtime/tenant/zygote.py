"""The main of a zygote: the per-GPU parent of forked-mode commands.

The runtime starts this module (`python -P -m krex_runtime.tenant.zygote`)
like a context process: its GPU's tenant environment (the interception
library preloaded), a cgroup of its own, its cores and user, its control
socket as stdin, whose first line brings the spec and the key the zygote
signs its lines with (tenant/worker_link.py). It makes itself not dumpable,
so that its children, which may run as its own uid, can neither ptrace it
nor take its descriptors (pidfd_getfd) or read its memory; each child is
made dumpable again. It imports the configured modules once,
checking after each that it may still fork safely (tenant/fork_safety.py:
single-threaded, CUDA driver not initialised), reports `ready`, then forks one
child per `fork` message. It never touches CUDA and never runs a command
itself; each child is a fresh process that creates its own context
(tenant/forked_child.py).

Control messages are JSON lines (the zygote's signed, worker_link.ZYGOTE_MESSAGES):
    runtime -> zygote:  {"type": "hello", "key", "spec"}             (first)
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

import ctypes
import gc
import importlib
import os
import select
import sys
import time
import traceback
from typing import Any

from krex_runtime.tenant import fork_safety
from krex_runtime.tenant.forked_child import PR_SET_DUMPABLE, run_child
from krex_runtime.tenant.worker_link import Link


def preload(modules: list[str]) -> None:
    """Import each module, then check that the process may still fork."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise RuntimeError(f"importing {name!r} failed: {type(exc).__name__}: {exc}") from exc
        fork_safety.check(name)


class Zygote:
    def __init__(self, link: Link) -> None:
        self.link = link
        self.poll = select.poll()
        self.poll.register(link.fileno(), select.POLLIN)
        self.children: dict[int, tuple[str, int]] = {}  # pidfd -> (command id, pid)

    def serve(self) -> None:
        while True:
            for fd, _events in self.poll.poll():
                if fd == self.link.fileno():
                    self.read()
                else:
                    self.reap(fd)

    def read(self) -> None:
        # Several fork messages may be on their way at once: each one's 3
        # descriptors, which travel with its first bytes, are taken in the
        # order they came; lines already read are handled before polling again.
        while True:
            msg, fds = self.link.receive(take=3)
            if msg is None:
                os._exit(0)  # the runtime is gone; the children are in its cgroups
            self.handle(msg, fds)
            if not self.link.pending():
                return

    def _send(self, msg: dict[str, Any]) -> None:
        self.link.send(msg)

    def handle(self, msg: dict[str, Any], fds: list[int]) -> None:
        if msg.get("type") != "fork" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            command_id = msg.get("id")
            self._send({"type": "fork_failed", "id": command_id if isinstance(command_id, str) else None,
                        "reason": "bad fork message"})
            return
        # Whatever the zygote's own streams hold is written once, by the zygote.
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self._send({"type": "fork_failed", "id": msg["id"], "reason": f"fork failed: {exc.strerror}"})
            return
        if pid == 0:
            try:
                self.link.forget()  # its key wiped, its socket closed: the child cannot speak for the zygote
                run_child(msg, fds)
            finally:
                os._exit(70)  # never back into the zygote's loop
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (msg["id"], pid)
        self.poll.register(pidfd, select.POLLIN)
        self._send({"type": "forked", "id": msg["id"], "pid": pid})

    def reap(self, pidfd: int) -> None:
        command_id, pid = self.children.pop(pidfd)
        self.poll.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        self._send({"type": "exited", "id": command_id, "pid": pid, "status": status})


def main() -> None:
    link, spec = Link.from_stdin()
    # Not dumpable: a child running as this uid cannot ptrace the zygote, take
    # its descriptors or read its memory (each child is made dumpable again).
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    t0 = time.monotonic()
    try:
        preload(list(spec["preload"]))
    except fork_safety.UnsafePreload as exc:
        link.send({"type": "failed", "reason": f"unsafe preload: {exc}"})
        os._exit(1)
    except BaseException as exc:
        traceback.print_exc()
        link.send({"type": "failed", "reason": str(exc)})
        os._exit(1)
    # What the imports made lives as long as the process: kept out of the
    # collector's reach, a child's collections do not touch (and so copy) its pages.
    gc.collect()
    gc.freeze()
    link.send({"type": "ready", "import_s": time.monotonic() - t0, "modules": list(spec["preload"])})
    Zygote(link).serve()


if __name__ == "__main__":
    main()
