"""One forked-mode command: the zygote's child, from fork to exit.

The child starts as a copy of the zygote (its imports done, CUDA untouched)
and becomes the command's own process:
  1. its own session (the runtime signals the command's process group);
  2. every descriptor but its own closed (`close_inherited`): its stdout and
     stderr become the command's pipes, stdin /dev/null, and nothing else of
     the zygote's stays open (its control socket, whose key the zygote wiped
     before calling here, its other children's pidfds, its log, which fds 1
     and 2 were, and whatever a preloaded module opened); made dumpable again
     (the zygote is not); with `tenants.uid_range`, the command's own uid
     taken (`become`: the zygote keeps the runtime's uid for this);
  3. it waits for the runtime's go (one byte on the go pipe): the runtime has
     moved it into the command's cgroup by then, so nothing of the command
     runs outside it. EOF instead means the runtime gave up on it: exit 125;
  4. random generators seeded as in a fresh process (below);
  5. the command runs as `python` would run it (tenant/command_runner.py):
     stdout and stderr on the runtime's pipes, the command's environment
     (set with putenv, so the interception library and the region client read
     the command's KREX_TENANT_ID, KREX_GATE_PATH and KREX_REGION_TOKEN, not
     the zygote's: they read them at the first CUDA call and the first
     region request, never earlier), cwd and argv; then non-daemon threads
     are joined and exit handlers run, and the process exits with the
     command's status (an uncaught KeyboardInterrupt dies of SIGINT), with
     `_exit` once its streams and C's stdio buffers are flushed
     (command_runner): the zygote's own frames are
     not unwound, and the C destructors of preloaded libraries do not run
     (so KREX_INTERCEPT_STATS gets no line from a forked command).

Random generators (tenant/framework_state.py). A fresh process seeds Python's
`random` and NumPy's legacy global generator from the OS; the child does the
same, and calls the `reseed` of any module that declares one in
`__krex_state__`. torch's generators are reseeded from the OS where a fresh
process seeds them so (its CPU generator in current releases: every fresh
process gets another `torch.initial_seed()`); one that starts from torch's
fixed seed keeps the state it inherited, which is that fresh state (the
zygote draws nothing).
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Any

from krex_runtime.tenant.command_runner import run_command
from krex_runtime.tenant.framework_state import frameworks, reseed_all

PR_SET_DUMPABLE = 4


def run_child(msg: dict[str, Any], fds: list[int]) -> None:
    """Never returns: the process exits with the command's status."""
    os.setsid()
    out_w, err_w, go_r = close_inherited(fds)
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
    _prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    if "identity" in msg:
        become(msg["identity"])
    try:
        go = os.read(go_r, 1)
    except OSError:
        go = b""
    os.close(go_r)
    if go != b"g":
        os._exit(125)
    reseed_all(frameworks())
    done = run_command(msg, [out_w, err_w], os.getpid(), join_threads=True)
    if done["signal"] is not None:
        signal.signal(done["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), done["signal"])
    code = done["exit_code"]
    os._exit(code if code is not None else 127)


def close_inherited(fds: list[int]) -> list[int]:
    """Keep only the command's own descriptors: `fds` (stdout, stderr and the
    go pipe's read end, returned at their new numbers), with stdout and
    stderr also as fds 1 and 2 and /dev/null as fd 0. Everything else the
    zygote had open is closed."""
    out_w, err_w, go_r = fds
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    moved = [os.dup(fd) for fd in (out_w, err_w, go_r)]  # above 2, whatever their numbers were
    keep = {0, 1, 2, *moved}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed by now
    return moved


def become(identity: dict[str, Any]) -> None:
    """With a uid per tenant: the command's own uid, before anything of it runs
    (the zygote kept the runtime's for this). A child that cannot is not run."""
    try:
        os.setgroups([int(g) for g in identity["groups"]])
        os.setgid(int(identity["gid"]))
        os.setuid(int(identity["uid"]))
        os.umask(int(identity["umask"]))
    except (OSError, KeyError, TypeError, ValueError):
        os._exit(126)
    # A process whose uid changed is not dumpable: its /proc files stay the
    # runtime's. It holds nothing of the runtime's now (close_inherited), so
    # it is made its own uid's again (as a process started by that uid would be).
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
    _prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
