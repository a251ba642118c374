"""krex_region_enter / krex_region_exit: no-op without a runtime, and the line
protocol of the region channel against a small test server."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from krex_native import Build, check_sanitizers


class LineServer:
    """Accepts connections, logs each line received, answers with `reply(line)`."""

    def __init__(self, path: Path, reply) -> None:
        self.path, self.reply = path, reply
        self.lines: list[str] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb", buffering=0) as f:
                for raw in f:
                    line = raw.decode().rstrip("\n")
                    self.lines.append(line)
                    answer = self.reply(line)
                    if answer is None:  # drop the connection
                        break
                    f.write(answer.encode() + b"\n")
            self.lines.append("<closed>")

    def wait_closed(self, connections: int) -> None:
        """The server notices a hang-up after the client exits: wait for it."""
        deadline = time.monotonic() + 30
        while self.lines.count("<closed>") < connections and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        self.sock.close()


TOKEN = "0123456789abcdef" * 4  # a region token's shape: 64 hex digits


def run_client(build: Build, *ops: str, **env: str) -> tuple[list[str], str]:
    proc = subprocess.run([str(build.tool("region_client")), *ops], capture_output=True, text=True,
                          env=build.env(preload=False, **env), timeout=60)
    check_sanitizers(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines(), proc.stderr


def enter_against(build: Build, path: Path, reply) -> list[str]:
    """What one krex_region_enter returns against a test server answering with `reply`."""
    server = LineServer(path, reply)
    try:
        out, _ = run_client(build, "enter", KREX_REGION_SOCKET=str(path))
    finally:
        server.close()
    return out


def test_noop_without_runtime(lib_build: Build) -> None:
    out, _ = run_client(lib_build, "enter", "exit", "enter", "exit")
    assert out == ["enter 0", "exit 0", "enter 0", "exit 0"]


def test_speaks_the_line_protocol(lib_build: Build, tmp_path: Path) -> None:
    seq = iter(range(1, 100))
    current = {}

    def reply(line: str) -> str:
        if line.startswith("HELLO "):
            return "OK"
        if line.startswith("ENTER "):
            current["seq"] = next(seq)
            return f"GRANTED {current['seq']}"
        if line == "EXIT":
            return f"RELEASED {current['seq']}"
        return "ERROR EPROTO unknown request"

    server = LineServer(tmp_path / "region.sock", reply)
    try:
        out, _ = run_client(lib_build, "enter", "exit", "enter", "exit",
                            KREX_REGION_SOCKET=str(server.path), KREX_TENANT_ID="42", KREX_REGION_TOKEN=TOKEN)
        server.wait_closed(1)
    finally:
        server.close()
    assert out == ["enter 0", "exit 0", "enter 0", "exit 0"]
    hello, *rest = server.lines
    words = hello.split()
    assert words[:3] == ["HELLO", "2", "42"] and int(words[3]) > 0 and words[4:] == [TOKEN]
    # one connection for the whole process; ENTER carries the measuring thread's tid
    assert [r.split()[0] for r in rest] == ["ENTER", "EXIT", "ENTER", "EXIT", "<closed>"]
    assert int(rest[0].split()[1]) > 0


def test_local_misuse_and_server_errors(lib_build: Build, tmp_path: Path) -> None:
    def reply(line: str) -> str:
        if line.startswith("HELLO "):
            return "OK"
        if line.startswith("ENTER "):
            return "ERROR ETIMEDOUT queue wait exceeded" if "refuse" in reply.mode else "GRANTED 9"
        if line == "EXIT":
            return "RELEASED 9"
        return "ERROR EPROTO what"

    reply.mode = ""
    server = LineServer(tmp_path / "r.sock", reply)
    try:
        env = dict(KREX_REGION_SOCKET=str(server.path), KREX_TENANT_ID="3")
        out, _ = run_client(lib_build, "exit", "enter", "enter", "exit", "exit", **env)
        assert out == ["exit %d" % -errno.EINVAL, "enter 0", "enter %d" % -errno.EBUSY, "exit 0",
                       "exit %d" % -errno.EINVAL]
        reply.mode = "refuse"
        out, _ = run_client(lib_build, "enter", **env)
        assert out == ["enter %d" % -errno.ETIMEDOUT]
    finally:
        server.close()


def test_token_from_the_environment_and_a_refused_hello(lib_build: Build, tmp_path: Path) -> None:
    def refuse(line: str) -> str:
        return "ERROR EPERM wrong region token for tenant 3"

    server = LineServer(tmp_path / "r.sock", refuse)
    try:
        env = dict(KREX_REGION_SOCKET=str(server.path), KREX_TENANT_ID="3")
        out, _ = run_client(lib_build, "enter", "enter", **env)  # no token: "-" in its place
        assert out == ["enter %d" % -errno.EPERM] * 2
        server.wait_closed(2)  # a refused HELLO ends the connection: the next enter says HELLO again
        assert server.lines == [f"HELLO 2 3 {server.lines[0].split()[3]} -", "<closed>"] * 2
        out, _ = run_client(lib_build, "enter", KREX_REGION_TOKEN="f" * 300, **env)
        assert out == ["enter %d" % -errno.EINVAL]  # longer than any HELLO: not sent
        server.wait_closed(3)
        assert server.lines[4:] == ["<closed>"]
    finally:
        server.close()

    def accept(line: str) -> str:  # the refusal as long as the server ever sends: 768 bytes
        return "OK" if line.startswith("HELLO ") else "ERROR EMSGSIZE line longer than 768 bytes".ljust(768, ".")

    assert enter_against(lib_build, tmp_path / "m.sock", accept) == ["enter %d" % -errno.EMSGSIZE]


def test_unreachable_runtime_and_dropped_connection(lib_build: Build, tmp_path: Path) -> None:
    out, _ = run_client(lib_build, "enter", KREX_REGION_SOCKET=str(tmp_path / "nobody.sock"))
    assert out == ["enter %d" % -errno.ENOENT]

    def reply(line: str) -> str | None:
        return "OK" if line.startswith("HELLO ") else None  # hang up on ENTER

    server = LineServer(tmp_path / "drop.sock", reply)
    try:
        out, _ = run_client(lib_build, "enter", "enter", KREX_REGION_SOCKET=str(server.path))
        server.wait_closed(2)
    finally:
        server.close()
    assert out == ["enter %d" % -errno.ECONNRESET] * 2  # reconnects for the second try
    assert server.lines.count("<closed>") == 2

    def garbage(line: str) -> str:
        return "HELLO THERE"

    assert enter_against(lib_build, tmp_path / "bad.sock", garbage) == ["enter %d" % -errno.EPROTO]


def test_refused_when_nobody_listens(lib_build: Build, tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the file stays, nobody listens
    out, _ = run_client(lib_build, "enter", KREX_REGION_SOCKET=str(path))
    assert out == ["enter %d" % -errno.ECONNREFUSED]
    assert os.path.exists(path)
