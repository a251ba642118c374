"""Fuzzing the region channel of one real runtime (policy krex, one simulated
GPU) with connections opened by a real tenant (tests/tenants/region_donor.py):
random bytes and lines before HELLO, random HELLOs, random messages after a
valid HELLO. The server answers every line with one protocol line (`ERROR
<code> <reason>` for what it refuses) or closes the connection; afterwards no
region is held, nothing is gated or frozen, no thread outside the tenant was
pinned, and a legitimate tenant still enters and exits a region.

The fuzzer waits for each reply before the next line, with a short pause, so
it stays at a few hundred lines a second at most.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_helpers import TEXT, budget
from hypothesis import example, given
from hypothesis import strategies as st
from region_checks import check_nothing_left
from runtime_helpers import REPO, stop_and_check

from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

PY = sys.executable
DONOR = REPO / "tests" / "tenants" / "region_donor.py"
REPLY = re.compile(r"(OK|GRANTED \d+( \S+)?|RELEASED \d+|ERROR [A-Z]+( .*)?)")
REPLY_TIMEOUT_S = 15.0
PAUSE_S = 0.003  # between lines: a few hundred a second at most
# gpu+cpu: the last test checks the fuzzer could not stop a region from freezing its bystander.
REGIONS = "[regions]\nprotection = \"gpu+cpu\"\nstale_after_s = 1.0\nheartbeat_interval_s = 0.2\nhold_limit_s = 10.0\n"


def hello_line(identity: dict[str, Any], tenant_id: str | None = None) -> bytes:
    """The HELLO a legitimate tenant sends (docs/native.md, "Region channel")."""
    tenant = tenant_id if tenant_id is not None else identity["tenant_id"]
    return f"HELLO 2 {tenant} {identity['pid']} {identity['token']}\n".encode()


class Donor:
    """The tenant that opens region channel connections for the fuzzer."""

    def __init__(self, rt: Runtime, path: Path) -> None:
        self.path = path
        done = rt.krex("submit", "--gpu", "0", "--", PY, str(DONOR), str(path))
        assert done.returncode == 0, done.stderr
        self.command_id = done.stdout.strip()
        wait_until(path.exists, 60, "the donor tenant to listen")

    def connect(self) -> tuple[socket.socket, dict[str, Any]]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(self.path))
            s.sendall(b"connect")
            identity, fds, _, _ = socket.recv_fds(s, 1024, 1)
        assert len(fds) == 1, "the donor passed no connection"
        conn = socket.socket(fileno=fds[0])
        conn.settimeout(REPLY_TIMEOUT_S)
        return conn, json.loads(identity)

    def stop(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(self.path))
            s.sendall(b"quit")


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    runtime = Runtime(tmp_path_factory.mktemp("region-fuzz"), policy="krex", sim=1, slots=4, extra_config=REGIONS).start()
    yield runtime
    stop_and_check(runtime)


@pytest.fixture(scope="module")
def donor(rt: Runtime) -> Iterator[Donor]:
    d = Donor(rt, rt.root / "donor.sock")
    yield d
    d.stop()
    assert rt.krex("wait", d.command_id).returncode == 0


@pytest.fixture(scope="module")
def bystander(rt: Runtime) -> Iterator[str]:
    """Another tenant of the GPU, kept busy: every region the fuzzer enters gates,
    drains and freezes it, and it must be let go every time."""
    done = rt.krex("submit", "--gpu", "0", "--", PY, str(REPO / "tests" / "tenants" / "busy.py"), "2000", "4")
    assert done.returncode == 0, done.stderr
    command_id = done.stdout.strip()
    stdout = rt.run_dir / "output" / f"{command_id}.stdout"
    wait_until(lambda: stdout.exists() and "ready" in stdout.read_text(), 60, "the bystander to run")
    yield command_id
    rt.krex("cancel", command_id)
    rt.krex("wait", command_id)


@pytest.fixture(scope="module")
def sentinel() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is no tenant: its thread must never be pinned."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def region_idle(rt: Runtime) -> bool:
    with rt.client() as c:
        gpu = c.call("status")["gpus"][0]
    return gpu["region_holder"] is None and gpu["region_queue"] == 0 and not gpu["frozen"]


# --- what the fuzzer sends ------------------------------------------------------------

# Placeholders, filled in per connection: this tenant's id, pid and thread id; a
# thread of another process (the sentinel).
TENANT, PID, OWN_TID, FOREIGN_TID = b"{tenant}", b"{pid}", b"{own_tid}", b"{foreign_tid}"
VALID_HELLO = b"{hello}"

WORDS = st.sampled_from([b"HELLO", b"ENTER", b"EXIT", b"OK", b"GRANTED", b"enter", b"ENTER\t", b"", b" "])
NUMBERS = st.sampled_from([b"0", b"1", b"-1", b"2", b"99999999999999999999999", b"\xc2\xb2", b"\xd9\xa1", b"1.5",
                           b"0x10", TENANT, PID, OWN_TID, FOREIGN_TID])
TOKENS = WORDS | NUMBERS | TEXT.map(str.encode) | st.binary(max_size=12)


def lines(min_size: int = 1) -> st.SearchStrategy[list[bytes]]:
    """Chunks of one line each; a chunk without its newline runs into the next."""
    line = st.lists(TOKENS, min_size=1, max_size=4).map(b" ".join) | st.binary(max_size=64) | st.sampled_from(
        [b"ENTER " + OWN_TID, b"ENTER " + FOREIGN_TID, b"ENTER 0", b"EXIT", b"x" * 2000]
    )
    chunk = st.tuples(line.map(lambda b: b.replace(b"\n", b" ")), st.booleans()).map(
        lambda lt: lt[0] + (b"\n" if lt[1] else b"")
    )
    return st.lists(chunk, min_size=min_size, max_size=8)


HELLOS = st.sampled_from([b"HELLO 1 " + TENANT + b" " + PID, b"HELLO 2 " + TENANT + b" " + PID,
                          b"HELLO 1 " + TENANT, b"HELLO 1 9999 " + PID, b"HELLO 1 " + TENANT + b" " + PID + b" x",
                          b"HELLO 1 -1 " + PID, b"HELLO  1  " + TENANT + b"  " + PID]).map(lambda b: b + b"\n")

SESSIONS = st.one_of(
    lines(),  # garbage before any HELLO
    st.tuples(HELLOS, lines(0)).map(lambda hl: [hl[0], *hl[1]]),  # a random HELLO, then more
    lines(0).map(lambda rest: [VALID_HELLO, *rest]),  # a valid HELLO, then random messages
)


def filled(chunk: bytes, identity: dict[str, Any], foreign_tid: int) -> bytes:
    if chunk == VALID_HELLO:
        return hello_line(identity)
    for name, value in ((TENANT, identity["tenant_id"]), (PID, identity["pid"]), (OWN_TID, identity["tid"]),
                        (FOREIGN_TID, foreign_tid)):
        chunk = chunk.replace(name, str(value).encode())
    return chunk


def exchange(conn: socket.socket, chunks: list[bytes]) -> list[str]:
    """Send chunk by chunk, reading the reply to each finished line; then close
    our side and read to the end. Returns every reply line the server sent.
    A server that closed with lines of ours unread resets the connection: that
    is closing too."""
    replies: list[str] = []
    reader = conn.makefile("rb")
    try:
        for chunk in chunks:
            conn.sendall(chunk)
            if chunk.endswith(b"\n"):
                reply = reader.readline()
                if not reply:
                    return replies
                replies.append(reply.decode())
            time.sleep(PAUSE_S)
        conn.shutdown(socket.SHUT_WR)
        replies += [line.decode() for line in reader.readlines()]  # the server closes when it reads the end
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        reader.close()
    return replies


@budget(150)
@given(SESSIONS)
@example([VALID_HELLO, b"ENTER " + FOREIGN_TID + b"\n", b"EXIT\n"]).via("a thread of another process")
@example([VALID_HELLO, b"ENTER 99999999999999999999999\n", b"EXIT\n"]).via("a tid beyond any integer the kernel takes")
@example([VALID_HELLO, b"ENTER " + OWN_TID + b"\n"]).via("leaving while holding")
@example([VALID_HELLO, b"ENTER " + OWN_TID + b"\n", b"ENTER 1\n", b"EXIT\n", b"EXIT\n"])
@example([b"\xff" * 2000 + b"\n"])
@example([VALID_HELLO, b"x" * 2000 + b"\n"])
@example([VALID_HELLO, b"ENTER " + OWN_TID])
def test_region_channel_answers_or_closes(rt: Runtime, donor: Donor, bystander: str,
                                          sentinel: subprocess.Popen[bytes], chunks: list[bytes]) -> None:
    foreign_affinity = os.sched_getaffinity(sentinel.pid)
    conn, identity = donor.connect()
    with conn:
        replies = exchange(conn, [filled(c, identity, sentinel.pid) for c in chunks])
    for reply in replies:
        assert reply.endswith("\n") and REPLY.fullmatch(reply[:-1]), f"not a protocol line: {reply!r}"
    wait_until(lambda: region_idle(rt), 15, "the region to be given back")
    check_nothing_left(rt.run_dir)
    assert os.sched_getaffinity(sentinel.pid) == foreign_affinity, "a thread outside the tenant was pinned"


def test_a_legitimate_tenant_still_enters_and_exits(rt: Runtime, donor: Donor, bystander: str) -> None:
    """Runs after the fuzzer in this module."""
    granted = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_granted"]
    assert any(e["frozen"] for e in granted), "no region the fuzzer entered froze the bystander"
    script = "from krex_runtime.client import region\nwith region() as r:\n    print('inside')\n"
    done = rt.krex("run", "--", PY, "-c", script)
    assert done.returncode == 0 and done.stdout == "inside\n", done.stderr
    conn, identity = donor.connect()
    with conn:
        replies = exchange(conn, [hello_line(identity), f"ENTER {identity['tid']}\n".encode(), b"EXIT\n"])
    assert replies[0] == "OK\n" and replies[1].startswith("GRANTED "), replies
    assert replies[2] == f"RELEASED {replies[1].split()[1]}\n", replies
    wait_until(lambda: region_idle(rt), 15, "the region to be given back")
    check_nothing_left(rt.run_dir)


def test_enter_with_a_digit_int_cannot_read_gets_an_error(rt: Runtime, donor: Donor) -> None:
    conn, identity = donor.connect()
    with conn:
        replies = exchange(conn, [hello_line(identity), "ENTER ²\n".encode()])
    # Refused as a line before it is read as ENTER: only ASCII travels on the channel.
    assert replies[0] == "OK\n" and replies[1:2] == ["ERROR EPROTO a line is not ASCII text\n"], replies
