"""systemd's notification protocol (sd_notify), for a unit of Type=notify
with WatchdogSec= (configs/systemd/krex-runtime.service).

A datagram to the socket named by NOTIFY_SOCKET (a path, or "@name" for an
abstract socket): READY=1 once the runtime serves (sockets bound, GPUs
discovered), STOPPING=1 when it begins to stop, STATUS= lines for
`systemctl status`, and WATCHDOG=1 every half of WATCHDOG_USEC from the event
loop, so that a loop that stops turning stops the pings and systemd restarts
the runtime. The standard library's socket module is enough; without
NOTIFY_SOCKET every call does nothing.

The variables are taken out of the environment when read: the tenants the
runtime starts must not talk to systemd in its name.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

log = logging.getLogger("krex.runtime")

ENV_SOCKET, ENV_WATCHDOG_USEC, ENV_WATCHDOG_PID = "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"


class Notifier:
    def __init__(self, address: str | None, watchdog_s: float | None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s
        self._sock: socket.socket | None = None
        self._failing = False  # warn once per run of failures, not at every watchdog ping

    @classmethod
    def from_environment(cls) -> Notifier:
        """Read (and remove) systemd's variables from os.environ."""
        address = os.environ.pop(ENV_SOCKET, "") or None
        usec, pid = os.environ.pop(ENV_WATCHDOG_USEC, ""), os.environ.pop(ENV_WATCHDOG_PID, "")
        watchdog_s = None
        # WATCHDOG_PID names the process systemd watches; absent, it is the main process (this one).
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog_s = int(usec) / 1e6
        if address is not None and not address.startswith(("/", "@")):
            log.warning("NOTIFY_SOCKET=%r is neither a path nor an abstract socket: not notifying systemd", address)
            address = None
        return cls(address, watchdog_s)

    def notify(self, *fields: str) -> None:
        if self.address is None:
            return
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                # A reader that falls behind must not stop the event loop: a full queue drops the ping.
                self._sock.setblocking(False)
            self._sock.sendto("\n".join(fields).encode(), target)
            self._failing = False
        except OSError as exc:  # systemd gone or the socket wrong: the runtime serves on regardless
            if not self._failing:
                log.warning("cannot notify systemd at %s: %s", self.address, exc)
            self._failing = True

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def stopping(self, status: str) -> None:
        self.notify("STOPPING=1", f"STATUS={status}")

    async def watchdog(self) -> None:
        """Ping at half the watchdog interval (as sd_watchdog_enabled advises)."""
        if self.address is None or self.watchdog_s is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_s / 2)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
