"""Helpers shared by the runtime tests (kept out of conftest.py, whose module
name is not unique across the test folders)."""

from __future__ import annotations

import threading
from pathlib import Path

import psutil

from krex_runtime import gate
from krex_runtime.hygiene import krex_processes

REPO = Path(__file__).resolve().parent.parent


def tenant_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes started by the runtime of `run_dir` (by their KREX_RUN_DIR)."""
    return krex_processes(run_dir)


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
