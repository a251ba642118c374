"""The shared-memory segment of one forwarded command (native/include/krex_forward.h).

The runtime makes it before the command starts (a file under /dev/shm, for
the command's user only), passes its descriptor to the context server that
serves the command and its path to the command (KREX_FORWARD_RING), reads
its state when the command has ended (which call was not forwarded, why the
server stopped) and removes it. The offsets below mirror the C header; a
test compiles the header and compares them.

The file is the command's: it may rewrite it, grow it or truncate it. So the
runtime reads and writes it with pread and pwrite, never through a mapping
(touching a mapped page of a truncated file is a SIGBUS), and tells the
server the sizes it made it with (the server never takes them from the
header).

Beside it the runtime makes the command's pinned arena (`pinned_size`
bytes, 0: none), a second file of the same name and owner with
PINNED_SUFFIX: the command's page-locked allocations come from it, and its
server maps it and registers the ranges handed out with the driver, so a
copy from them is one DMA (native/src/forward/client_pinned.c). It is sparse
until the command allocates; made new for each command and removed with
the segment, so nothing of one command's pinned memory reaches another.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0x31474E4952574B4B  # "KKWRING1"
VERSION = 1
HEADER_SIZE = 4096
ENV_RING = "KREX_FORWARD_RING"
ENV_FALLBACK = "KREX_FORWARD_FALLBACK"
ENV_PINNED = "KREX_FORWARD_PINNED"  # the pinned arena's path (KREX_FWD_ENV_PINNED)
PINNED_SUFFIX = "-pinned"
EXIT_UNKNOWN_CALL = 86  # KREX_FWD_EXIT_UNKNOWN_CALL

STATE_NEW, STATE_SERVING, STATE_ENDED, STATE_FAILED = 0, 1, 2, 3

# Field offsets of struct krex_fwd_header.
OFFSETS = {
    "server_state": 32,
    "server_pid": 36,
    "client_pid": 40,
    "req_head": 64,
    "calls_sent": 80,
    "staged_pinned_copies": 88,
    "unknown_after_region": 96,
    "req_tail": 128,
    "deferred_result": 156,
    "calls_done": 160,
    "reply_out": 192,
    "deferred_call": 256,
    "reason": 320,
    "unknown_call": 576,
}
REASON_LEN, CALL_LEN = 256, 64
SHM_DIR = Path("/dev/shm")


@dataclass(frozen=True)
class SegmentState:
    state: int
    reason: str  # why the server stopped serving ("" while it serves)
    unknown_call: str  # the first call the client did not forward ("": none)
    calls_sent: int
    calls_done: int
    client_pid: int
    after_region: bool = False  # unknown_call came after the command had held a region
    staged_pinned_copies: int = 0  # copies from or to page-locked memory that were staged


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


SEGMENT_NAMES = "krex-fwd-"  # every forwarding segment's name starts so, then its run folder's tag


def segment_prefix(run_dir: Path) -> str:
    """The name every segment of one runtime starts with: its run folder's, so a
    restarted runtime removes what its predecessor left (`remove_left`) and no
    other runtime's segment is touched or counted."""
    return f"{SEGMENT_NAMES}{hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:10]}-"


def remove_left(run_dir: Path) -> list[str]:
    """Remove the segments an earlier run of this runtime left (killed before
    it could): none of its commands runs now."""
    done = []
    for path in sorted(SHM_DIR.glob(segment_prefix(run_dir) + "*")):
        path.unlink(missing_ok=True)
        done.append(f"removed forwarding segment {path.name}")
    return done


class Segment:
    """One command's segment: made at construction, removed by `remove`."""

    def __init__(self, prefix: str, tag: str, ring_size: int, staging_size: int, owner: tuple[int, int] | None,
                 pinned_size: int = 0) -> None:
        if ring_size < 4096 or ring_size & (ring_size - 1):
            raise ValueError(f"the ring size must be a power of two of at least 4096 bytes, not {ring_size}")
        if pinned_size < 0 or pinned_size % 4096:
            raise ValueError(f"the pinned arena must be whole pages, not {pinned_size} bytes")
        self.path = SHM_DIR / f"{prefix}{tag}-{secrets.token_hex(6)}"
        self.ring_size, self.staging_size = ring_size, staging_size  # what the server is told, never the header
        self.pinned_size = pinned_size
        self.pinned_path = self.path.with_name(self.path.name + PINNED_SUFFIX)
        header = struct.pack("<QIIQQ", MAGIC, VERSION, HEADER_SIZE, ring_size, staging_size)
        self.fd = _make(self.path, HEADER_SIZE + ring_size + staging_size, header, owner)  # passed to the server
        self.pinned_fd = -1
        if pinned_size:
            try:
                self.pinned_fd = _make(self.pinned_path, pinned_size, b"", owner)
            except BaseException:
                self.remove()
                raise

    def state(self) -> SegmentState:
        m = os.pread(self.fd, HEADER_SIZE, 0)
        if len(m) < HEADER_SIZE:  # the command truncated it
            return SegmentState(STATE_FAILED, "its forwarding segment was truncated (by the command)", "", 0, 0, 0)
        o = OFFSETS
        state, = struct.unpack_from("<I", m, o["server_state"])
        client, = struct.unpack_from("<i", m, o["client_pid"])
        sent, = struct.unpack_from("<Q", m, o["calls_sent"])
        done, = struct.unpack_from("<Q", m, o["calls_done"])
        reason = _text(m[o["reason"]:o["reason"] + REASON_LEN]) if state == STATE_FAILED else ""
        unknown = _text(m[o["unknown_call"]:o["unknown_call"] + CALL_LEN])
        staged, = struct.unpack_from("<Q", m, o["staged_pinned_copies"])
        after, = struct.unpack_from("<I", m, o["unknown_after_region"])
        return SegmentState(state, reason, unknown, sent, done, client, after != 0, staged)

    def mark_failed(self, reason: str) -> None:
        """Its server died: a client waiting on it sees this within its park bound
        (a server that failed the segment itself keeps its own reason)."""
        if self.state().state == STATE_FAILED:
            return
        data = reason.encode()[: REASON_LEN - 1] + b"\0"
        os.pwrite(self.fd, data, OFFSETS["reason"])
        os.pwrite(self.fd, struct.pack("<I", STATE_FAILED), OFFSETS["server_state"])

    def remove(self) -> None:
        for fd in (self.fd, self.pinned_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.pinned_fd = -1
        self.path.unlink(missing_ok=True)
        self.pinned_path.unlink(missing_ok=True)


def _make(path: Path, size: int, head: bytes, owner: tuple[int, int] | None) -> int:
    """A new file of `size` bytes starting with `head`, for the command's user
    only (and the runtime); its descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        if head:
            os.pwrite(fd, head, 0)
        if owner is not None:  # the command's uid: only it (and the runtime) may open it
            os.fchown(fd, owner[0], owner[1])
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd
