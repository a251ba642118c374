"""The watchdog: a small process beside the runtime that undoes what the
runtime would leave if it died without stopping (SIGKILL, a crash, the OOM
killer).

A runtime that dies while a region is held leaves the other tenants frozen
(a cgroup freeze outlives its writer) and the gate closed (gated tenants fail
open only once the heartbeat is `regions.stale_after_s` old). The runtime
starts the watchdog first thing (`runtime.watchdog`), in its own cgroup,
outside the tenants' slice and in a session of its own, so nothing the
runtime freezes, kills or signals reaches it. The watchdog holds a pidfd of
the runtime and sleeps on it (a bare interpreter until then); the moment the
runtime is gone it loads and runs the recovery `krex-runtime --recover` runs (service/host.py, `recover_run_dir`):
thaw and reopen first, then end the dead runtime's commands and remove its
slice, gates and sockets, each step one line on its stderr (the runtime's
log). A runtime that stops cleanly has undone all of it itself and ends the
watchdog last; one that a new runtime replaced before the watchdog got the
run folder's claim is left to that runtime's own recovery.

    python -m krex_runtime.service.watchdog RUNTIME_PID RUN_DIR
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

STOP_TIMEOUT_S = 5.0


class Watchdog:
    """The runtime's handle on its watchdog process."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @classmethod
    def start(cls, run_dir: Path) -> Watchdog:
        """OSError when it cannot be started."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "WATCHDOG_"))}
        proc = subprocess.Popen(
            [sys.executable, "-m", "krex_runtime.service.watchdog", str(os.getpid()), str(run_dir)],
            stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd="/",
        )
        return cls(proc)

    def stop(self) -> None:
        """After a clean stop there is nothing left to undo."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: python -m krex_runtime.service.watchdog RUNTIME_PID RUN_DIR", file=sys.stderr)
        return 2
    pid, run_dir = int(argv[0]), Path(argv[1])
    try:  # first: from here on the runtime's death is seen
        runtime: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        runtime = None
    if os.getppid() != pid and runtime is not None:  # it died before the pidfd was open (and its pid was reused)
        os.close(runtime)
        runtime = None
    if runtime is not None:
        select.select([runtime], [], [])
    # Only now: a watchdog costs a node (and a test suite starting hundreds of
    # runtimes) an interpreter, not the runtime's imports; loading them takes
    # a few tenths of a second once it is needed.
    from krex_runtime.service.host import WATCHDOG, StartupError, recover_run_dir

    try:
        done = recover_run_dir(run_dir, WATCHDOG)
    except StartupError:
        return 0  # a new runtime serves the run folder: its start recovered it
    for line in done:
        print(f"{WATCHDOG}: runtime pid {pid} died: {line}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
