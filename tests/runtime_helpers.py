"""Helpers shared by the runtime tests (kept out of conftest.py, whose module
name is not unique across the test folders)."""

from __future__ import annotations

import threading
from pathlib import Path

import psutil

from krex_runtime import gate
from krex_runtime.cgroups import CgroupSlice
from krex_runtime.local_runtime import Runtime
from krex_runtime.simcuda import remove_device

REPO = Path(__file__).resolve().parent.parent


def tenant_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes started by the runtime of `run_dir` (by their KREX_RUN_DIR)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("KREX_RUN_DIR") == str(run_dir) and proc.status() != psutil.STATUS_ZOMBIE:
                if "KREX_COMMAND_ID" in proc.environ():
                    found.append(proc)
        except psutil.Error:
            continue
    return found


def stop_and_check(rt: Runtime) -> None:
    """Stop a test's runtime (if still running), assert it stopped cleanly and left
    no process behind, and remove its simulated device and cgroup slice."""
    if rt.proc is not None and rt.proc.poll() is None:
        assert rt.stop() == 0, rt.log_path.read_text()
    leftovers = tenant_processes(rt.run_dir)
    for p in leftovers:
        p.kill()
    assert not leftovers, f"processes left behind: {leftovers}"
    remove_device(rt.device)
    for version in (2, 1):  # a runtime killed on purpose leaves its slice
        leftover_slice = CgroupSlice.open(rt.run_dir, version)
        if leftover_slice is not None:
            leftover_slice.remove()


class Heartbeat:
    """The runtime's heartbeat on a gate, stamped from a thread until stopped:
    for tests that drive a gate without a runtime."""

    def __init__(self, g: gate.Gate) -> None:
        self.g, self.stop_event = g, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.wait(0.05):
            self.g.stamp_heartbeat()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join()
