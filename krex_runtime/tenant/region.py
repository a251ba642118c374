"""Critical regions for benchmark code: `with region(): <timing loop>`.

Under the KREX runtime, entering a region blocks until this process holds its
GPU alone: the runtime gates, drains and freezes the other tenants of that GPU
and pins the calling thread to reserved cores. Outside the runtime (no
KREX_REGION_SOCKET) a region is a no-op, so a candidate runs standalone too.

Standard library only: this module is imported by every candidate.

    from krex_runtime.client import region

    with region():
        times = [timed_run() for _ in range(100)]

    @region()
    def measure(): ...

The wire protocol (docs/native.md, "Region channel"; krex_runtime/region_wire.py)
is shared with the C API in native/include/krex.h: one Unix-socket connection
per process, one line per message.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from krex_runtime import region_wire
from krex_runtime.tenant import env, integrity

F = TypeVar("F", bound=Callable[..., Any])


class RegionError(RuntimeError):
    """The runtime refused or revoked a region; `code` is an errno name."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}" if reason else code)
        self.code = code
        self.reason = reason


class _Channel:
    """This process's connection to the runtime's region channel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._file: socket.SocketIO | None = None
        self._pid = 0
        self.holding = False
        self.depth = 0  # regions entered and not yet exited; only the outermost talks to the runtime
        self.region_seq: int | None = None
        self.flags: list[str] = []
        self.exit_flags: list[str] = []  # of the clock at the last release (RELEASED <seq> <flags>)
        self.integrity: dict[str, Any] | None = None  # the runtime's integrity record of the last release

    def _connect(self, path: str) -> None:
        if self._sock is not None and self._pid == os.getpid() and not self.holding and _readable(self._sock):
            # Between regions the runtime speaks only to answer: something to
            # read is its word before closing an idle connection, or the close.
            self._drop()
        if self._sock is not None and self._pid == os.getpid():
            return
        # After a fork the connection belongs to the parent: open our own.
        self._sock, self._file, self.holding, self.depth = None, None, False, 0
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise RegionError("ECONNREFUSED", f"cannot reach the region channel {path}: {exc.strerror}") from None
        self._sock, self._file, self._pid = sock, sock.makefile("rwb", buffering=0), os.getpid()
        tenant = os.environ.get(env.TENANT_ID) or "-1"
        token = os.environ.get(env.REGION_TOKEN) or "-"
        try:
            self._transact(region_wire.hello(tenant, str(os.getpid()), token), "OK")
        except RegionError:
            self._drop()  # the runtime hangs up on a refused HELLO: the next try starts over
            raise

    def _transact(self, line: str, want: str) -> str:
        assert self._file is not None
        try:
            self._file.write(line.encode() + b"\n")
            reply = self._file.readline().decode().rstrip("\n")
        except OSError as exc:
            self._drop()
            raise RegionError("ECONNRESET", f"region channel broke: {exc}") from None
        if not reply:
            self._drop()
            raise RegionError("ECONNRESET", "the runtime closed the region channel")
        word, _, rest = reply.partition(" ")
        if word == want:
            return rest
        if word == "ERROR":
            code, _, reason = rest.partition(" ")
            raise RegionError(code, reason)
        self._drop()
        raise RegionError("EPROTO", f"unexpected reply {reply!r}")

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock, self._file, self.holding, self.depth = None, None, False, 0

    def enter(self, path: str, settle_s: float | None = None) -> None:
        with self._lock:
            if self.depth and self._pid == os.getpid():
                # A region inside a region (a wrapped timing harness called in the
                # user's own region(), or one harness calling another) is the same
                # region: the process already holds its GPU.
                self.depth += 1
                return
            self._connect(path)
            settle = "" if settle_s is None else f" {round(settle_s * 1000)}"
            granted = self._transact(f"ENTER {threading.get_native_id()}{settle}", "GRANTED").split()
            self.holding, self.depth = True, 1
            self.region_seq = int(granted[0]) if granted and granted[0].isdigit() else None
            self.flags = granted[1].split(",") if len(granted) > 1 else []

    def verdict(self) -> tuple[str, list[str]]:
        """The exclusivity certificate of the region this process released last."""
        with self._lock:
            if self._sock is None or self._pid != os.getpid():
                raise RegionError("EINVAL", "this process has released no region")
            _seq, _, rest = self._transact("VERDICT", "VERDICT").partition(" ")
            verdict, _, reasons = rest.partition(" ")
            return verdict, [r.strip() for r in reasons.split(" | ") if r.strip()]

    def exit(self) -> bool:
        """Leave a region; True when this released it (the outermost exit)."""
        with self._lock:
            if self.depth > 1 and self._pid == os.getpid():
                self.depth -= 1
                return False
            self.depth = 0
            if not self.holding:
                raise RegionError("EINVAL", "this process does not hold its region")
            self.holding = False
            self.integrity = None
            sent = region_wire.words(integrity.library_counts(), integrity.patched_now())
            released = self._transact(f"EXIT {sent}".rstrip(), "RELEASED").split()
            # RELEASED <seq> [<exit flags>] [integrity=... harness=...]: the words the record was made of
            said = [w for w in released[1:] if w.startswith(("integrity=", "harness="))]
            flags = [w for w in released[1:2] if w not in said]
            self.exit_flags = flags[0].split(",") if flags else []
            self.integrity = region_wire.record(*region_wire.parse_exit(" ".join(said))) if said else None
            return True


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


_channel = _Channel()


def under_runtime() -> bool:
    return bool(os.environ.get(env.REGION_SOCKET))


class region(contextlib.ContextDecorator):
    """Exclusive use of this process's GPU for the duration of the block.

    Regions nest: one entered while the process already holds its region is
    part of the outer one (nothing is asked of the runtime), and the region
    ends with the outermost exit.

    Raises RegionError when the runtime refuses the region, and on exit when
    the runtime revoked it (the hold limit passed): measurements taken inside
    a revoked region are not protected and should be discarded. `flags`
    names conditions that make a measurement suspect (a power or thermal
    throttle, or an SM clock below what the GPU is set to hold: `clock:...`), at the grant
    and, once the region is released, at the release too (prefixed `exit:`);
    `off_clock` says whether the clock was off at either.

    `settle_s` bounds this region's settle step (docs/regions.md): at entry,
    with the others drained, wait up to that long for the GPU's clock and
    power state to recover from their work before the grant, instead of the
    node's `regions.settle_max_s`. Ask for it where a measurement is long
    enough to feel a power cap (kernels over a few milliseconds); every
    millisecond of it no tenant uses the GPU. At most the node's
    `regions.settle_cap_s` (else RegionError EINVAL); ignored by a region
    nested in one already held.
    """

    _released = False  # this object's exit released the region (it was the outermost)
    _id: int | None = None
    _certificate: tuple[str, list[str]] | None = None
    integrity: dict[str, Any] | None = None
    """After the region: the runtime's integrity record of its timed windows
    (docs/integrity.md): {"windows", "clean", "summary", "flags": {name:
    {"count", "reason"}}}; None outside the runtime, for an inner region, or
    when the runtime made none (a process without the interception library)."""

    def __init__(self, settle_s: float | None = None) -> None:
        if settle_s is not None and not 0 <= settle_s <= 10:
            raise ValueError(f"settle_s must be within [0, 10] seconds, got {settle_s!r}")
        self.settle_s = settle_s
        self.flags: list[str] = []  # e.g. "throttled:hw_thermal", "exit:clock:1500MHz-below-top-1980MHz"

    @property
    def id(self) -> int | None:
        """The region's id (its sequence number in the runtime's records and
        events), from the grant; None outside the runtime. A region nested in
        one already held carries the outer one's id."""
        return self._id

    @property
    def verdict(self) -> str:
        """After the region: `verified`, `violated` or `unknown`, the runtime's
        exclusivity certificate (asked once, on first read; `unknown` outside
        the runtime and for an inner region, whose outer one is the region)."""
        return self._certify()[0]

    @property
    def verdict_reasons(self) -> list[str]:
        return self._certify()[1]

    @property
    def off_clock(self) -> bool:
        """The SM clock was below the GPU's top clock by more than the tolerance at the grant or the release."""
        return any(f.removeprefix("exit:").startswith("clock:") for f in self.flags)

    def _certify(self) -> tuple[str, list[str]]:
        if self._certificate is None:
            if not self._released:
                return "unknown", ["not released by this region() (outside the runtime, nested, or still held)"]
            self._certificate = _channel.verdict()
        return self._certificate

    def __enter__(self) -> region:
        path = os.environ.get(env.REGION_SOCKET)
        if path:
            _channel.enter(path, self.settle_s)
            self.flags = list(_channel.flags)
            self._id = _channel.region_seq
        return self

    def __exit__(self, *exc: object) -> None:
        if os.environ.get(env.REGION_SOCKET):
            self._certificate = None
            self._released = _channel.exit()
            if self._released:
                self.flags = self.flags + [f"exit:{f}" for f in _channel.exit_flags]
                self.integrity = _channel.integrity
