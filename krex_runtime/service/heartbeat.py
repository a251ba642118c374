"""The gates' heartbeat, stamped from a thread of its own.

Tenants fail open once the heartbeat is older than `regions.stale_after_s`,
so it must keep its timing whatever the event loop is doing (answering a
flood of requests, encoding a large snapshot, a long GC pause): a thread
stamps it every `regions.heartbeat_interval_s`. It stamps only while the
event loop, which serves the regions, shows it is alive (`loop_alive`
every interval): a loop stuck for half the stale window stops the heartbeat,
and the tenants fail open as they would for a dead runtime.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("krex.runtime")


class Heartbeat:
    def __init__(self, stamp: Callable[[], None], interval_s: float, stale_after_s: float) -> None:
        self._stamp = stamp
        self.interval_s = interval_s
        self._loop_window_s = stale_after_s / 2
        self._loop_seen = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="krex-heartbeat", daemon=True)
        self.held_back = 0  # beats not stamped because the loop was not seen

    def start(self) -> None:
        self._thread.start()

    def loop_alive(self) -> None:
        """Called from the event loop, every interval."""
        self._loop_seen = time.monotonic()

    def stop(self) -> None:
        """Stop stamping (before the gates are unmapped)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._loop_seen <= self._loop_window_s:
                try:
                    self._stamp()
                except Exception:  # the heartbeat must outlive any one failure
                    log.exception("cannot stamp the gates' heartbeat")
            else:
                self.held_back += 1
                if self.held_back == 1:
                    log.error("the event loop has not run for %.1f s: the heartbeat stops, tenants fail open",
                              time.monotonic() - self._loop_seen)
            self._stop.wait(self.interval_s)
