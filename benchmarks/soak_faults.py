"""The faults a soak (soak.py) injects besides a tenant's own: floods of the
read-only control socket and of the region channel, each watched for a
`status` that answers in time, and a filling disk under the output folder;
and the kill a faulty tenant gets.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import zmq

from krex_runtime.api import Client, RequestFailed, RuntimeUnavailable
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol

TENANT_FAULTS = ("kill_in_region", "kill_outside_region", "hang_past_hold_limit", "hang_past_timeout", "cancel")
NODE_FAULTS = ("read_only_flood", "channel_flood", "fill_disk")  # fill_disk only where a tmpfs can be mounted
RESTART_FAULTS = ("restart_sigkill", "restart_sigterm")
FLOOD_S = 3.0  # how long each flood lasts
FLOOD_STATUS_BOUND_S = 10.0  # `status` must answer within this during a flood
CHANNEL_FLOOD_CONNECTIONS = 200
DISK_MIB = 16  # the output folder's tmpfs
DISK_FULL_S = 4.0  # how long it stays full


class Flood(threading.Thread):
    """One flood for FLOOD_S: `snapshot` requests on the read-only socket that
    are never read, or region-channel connections that say nothing. Midway,
    `status` must answer within FLOOD_STATUS_BOUND_S; `problem` says if not."""

    def __init__(self, kind: str, run_dir: Path) -> None:
        super().__init__(daemon=True)
        self.kind, self.run_dir = kind, run_dir
        self.stop = threading.Event()
        self.sent = 0
        self.status_s: float | None = None
        self.problem = ""

    def run(self) -> None:
        checker = threading.Thread(target=self._check_status, daemon=True)
        checker.start()
        try:
            self._read_only() if self.kind == "read_only_flood" else self._channel()
        finally:
            checker.join()

    def _read_only(self) -> None:
        ctx = zmq.Context()
        socks = [ctx.socket(zmq.DEALER) for _ in range(4)]
        for s in socks:
            s.setsockopt(zmq.LINGER, 0)
            s.connect(endpoints.control_read_only(self.run_dir))
        frame = protocol.encode(protocol.request("snapshot"))
        deadline = time.monotonic() + FLOOD_S
        while not self.stop.is_set() and time.monotonic() < deadline:
            for s in socks:
                try:
                    s.send(frame, zmq.NOBLOCK)
                    self.sent += 1
                except zmq.Again:
                    time.sleep(0.0005)  # the runtime pushes back
        for s in socks:
            s.close(linger=0)
        ctx.term()

    def _channel(self) -> None:
        held = []
        for _ in range(CHANNEL_FLOOD_CONNECTIONS):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(str(self.run_dir / "region.sock"))
            except OSError:
                conn.close()
                continue
            held.append(conn)
            self.sent += 1
        self.stop.wait(FLOOD_S)
        for conn in held:
            conn.close()

    def _check_status(self) -> None:
        self.stop.wait(FLOOD_S / 3)
        t0 = time.monotonic()
        try:
            with Client(endpoints.control(self.run_dir), timeout=FLOOD_STATUS_BOUND_S) as c:
                c.call("status")
            self.status_s = time.monotonic() - t0
        except (RuntimeUnavailable, RequestFailed) as exc:
            if not self.stop.is_set():  # a restart in the middle is no finding
                self.problem = f"{self.kind}: status did not answer within {FLOOD_STATUS_BOUND_S:g} s ({exc})"


class Disk:
    """The output folder on a small tmpfs of its own, which `fill` fills to
    the last byte and `free` empties again; `available` is False where no
    tmpfs can be mounted (not root), and the fault is then skipped."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.filler = where / "soak-filler"
        self.available = False
        self.full_until = 0.0

    def mount(self) -> None:
        if os.geteuid() != 0:
            return
        self.where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(self.where)],
                              capture_output=True)
        self.available = done.returncode == 0

    def fill(self) -> None:
        try:
            with open(self.filler, "ab") as f:
                while True:
                    f.write(b"\0" * (1 << 16))
                    f.flush()
        except OSError:
            pass  # full
        self.full_until = time.monotonic() + DISK_FULL_S

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)
        self.full_until = 0.0

    def unmount(self) -> None:
        if self.available:
            self.free()
            subprocess.run(["umount", "-l", str(self.where)], capture_output=True)
            self.available = False


def started_before(pid: int | None, when: float) -> bool:
    try:
        return psutil.Process(pid).create_time() <= when
    except psutil.Error:
        return False


def kill(pid: int | None) -> None:
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
