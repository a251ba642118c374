"""The main of a persistent context process: one pooled command at a time.

The runtime starts this module (`python -P -m krex_runtime.tenant.context_worker`)
with the tenant environment of its GPU, in a cgroup of its own, with its
control socket as stdin; the runtime's first line on it brings the spec and
the key this process signs its lines with (tenant/worker_link.py: nothing of
the channel is on the command line). It imports the configured modules and
creates its CUDA context once, reports `ready`, then serves `run` messages.
Each `run` brings the write ends of two pipes (SCM_RIGHTS); they become fd 1
and 2 while the command runs, so the runtime pumps its output the same way as
a process command's.

Control messages are JSON lines (the worker's signed, worker_link.CONTEXT_MESSAGES):
    runtime -> worker: {"type": "hello", "key", "spec"}               (first)
    runtime -> worker: {"type": "run", "id", "entry", "cwd", "env"}  (+ 2 fds)
    worker -> runtime: {"type": "imported", "import_s"}              (start-up)
    runtime -> worker: {"type": "create"}                  (its turn to create its context)
    worker -> runtime: {"type": "ready", "startup_s", "context"}
                       {"type": "failed", "reason"}                 (start-up)
                       {"type": "done", "exit_code", "signal", "state", "reason"}
                       {"type": "clean", "ok", "cause", "reason", "clean_s"}   (after cleanup)

`done` comes as soon as the command's own work (including its atexit
handlers) is over, so its result is not delayed by the cleanup and health
check that follow; the runtime gives the process new work only after `clean`,
and a process whose clean-up fails is retired before any other command runs
in it. A line the runtime did not expect from it, or one it did not sign,
also retires it (commands/pooled/pooled_pool.py).

Isolation between commands: a fresh __main__ namespace each time, and after
each command its sys.path, sys.argv, environment, cwd, signal handlers and
mask, timers, umask, CPU affinity, hooks, warnings filters, root logger,
atexit handlers, open files (fds beyond the baseline that are not device nodes
or anonymous inodes the driver may own), process settings
(tenant/process_settings.py) and the modules it imported are put back as they
were. A module that loaded a native extension from an installed package stays
loaded (such modules cannot be loaded twice into one process). What cannot be
put back ends the process instead: a thread of any kind left running, an
audit hook added, a changed module or class attribute or framework setting
(tenant/process_state.py: "state-changed: torch.backends.cuda.matmul.allow_tf32"),
device memory that could not be freed, a failed health check. Random
generators start each command as in a fresh process.

The worker is split by concern: `cuda_context` (the context of each kind),
`command_runner` (one command, run as `python` would), `isolation` (the
baseline a command is put back to) with `process_state` and
`framework_state` (what is compared, what is reseeded); this module is the
protocol loop.

These modules use the standard library only, and import as little as
possible: everything they import is part of every command's baseline.
"""

from __future__ import annotations

import atexit
import importlib
import os
import time
import traceback
from typing import Any

from krex_runtime.tenant.command_runner import run_command
from krex_runtime.tenant.cuda_context import CONTEXTS, Context
from krex_runtime.tenant.isolation import Baseline
from krex_runtime.tenant.worker_link import Link


def serve(link: Link, spec: dict[str, Any]) -> None:
    t0 = time.monotonic()
    try:
        for name in spec["preload"]:
            importlib.import_module(name)
        # Imports run in parallel with other context processes; the context
        # waits for the runtime's go, one creation at a time node-wide.
        link.send({"type": "imported", "import_s": time.monotonic() - t0})
        go, fds = link.receive(take=16)
        for fd in fds:
            os.close(fd)
        if go is None:
            os._exit(0)
        if go.get("type") != "create":
            raise RuntimeError(f"expected the runtime's create message, got {go.get('type')!r}")
        context = CONTEXTS[spec["context"]]()
        context.check()
    except BaseException as exc:
        traceback.print_exc()
        link.send({"type": "failed", "reason": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    # Exit handlers of preloaded modules are the context's, not any command's:
    # the process ends with os._exit and never runs them.
    atexit._clear()
    baseline = Baseline()
    link.send({"type": "ready", "startup_s": time.monotonic() - t0, "context": context.kind})
    pid = os.getpid()
    while True:
        msg, fds = link.receive(take=2)
        if msg is None:
            os._exit(0)
        if msg.get("type") != "run" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            link.send({"type": "done", "state": "failed", "exit_code": None, "signal": None, "reason": "bad run message"})
            link.send({"type": "clean", "ok": False, "cause": "cleanup", "reason": "bad run message", "clean_s": 0.0})
            continue
        entry = msg["entry"]
        link.send(run_command(msg, fds, pid))
        command_dirs = [os.path.realpath(msg["cwd"] or "/")]
        if entry["kind"] == "path":
            command_dirs.append(os.path.dirname(os.path.realpath(os.path.join(msg["cwd"] or "/", entry["target"]))))
        t_clean = time.monotonic()
        clean = _clean(baseline, context, command_dirs, spec["health_check"])
        link.send({**clean, "clean_s": time.monotonic() - t_clean})


def _clean(baseline: Baseline, context: Context, command_dirs: list[str], health_check: bool) -> dict[str, Any]:
    try:
        cause, why = baseline.restore(command_dirs)
        if why:
            return {"type": "clean", "ok": False, "cause": cause, "reason": why}
        why = baseline.state.check()
        if why:
            return {"type": "clean", "ok": False, "cause": "state-changed", "reason": why}
        why = context.free_leaks()
        if why:
            return {"type": "clean", "ok": False, "cause": "leak", "reason": why}
        if health_check:
            try:
                context.check()
            except Exception as exc:
                return {"type": "clean", "ok": False, "cause": "health", "reason": f"health check failed: {exc}"}
    except Exception as exc:
        traceback.print_exc()
        return {"type": "clean", "ok": False, "cause": "cleanup", "reason": f"cleanup failed: {exc!r}"}
    return {"type": "clean", "ok": True, "cause": "", "reason": ""}


def main() -> None:
    link, spec = Link.from_stdin()
    serve(link, spec)


if __name__ == "__main__":
    main()
