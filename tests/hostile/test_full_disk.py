"""Output under a full disk: the output folder on a tiny tmpfs that is full.
The pipes are drained all the same, so the time limit, cancel and the
runtime's stop work as on a healthy disk; attached clients get every byte;
the result says how many bytes of each stream the files lost, and `krex run`
says so in one line."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY

from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

BYTES = 300_000  # more than a pipe holds: a writer that nobody drains blocks
# Writes, says so by a file (its argument) once the pipe took all but the last pipeful, then hangs.
WRITES_THEN_HANGS = (
    f"import pathlib, sys, time\nsys.stdout.write('x' * {BYTES})\nsys.stdout.flush()\n"
    "if len(sys.argv) > 1: pathlib.Path(sys.argv[1]).touch()\ntime.sleep(1000)\n"
)


@contextlib.contextmanager
def full_filesystem(where: Path) -> Iterator[None]:
    """A 64 KiB tmpfs at `where`, filled to the last byte."""
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        with contextlib.suppress(OSError), open(where / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def test_a_full_output_disk_loses_output_loudly_and_blocks_nothing(make_runtime: Any) -> None:
    rt: Runtime = make_runtime(sim=1)
    with full_filesystem(rt.run_dir / "output"):
        done = rt.krex("run", "--", "echo", "RESULT-LINE")
        assert done.returncode == 0 and done.stdout == "RESULT-LINE\n", done
        warning = done.stderr.strip()
        assert warning.startswith("krex: warning: ") and "its output files lost 12 bytes of stdout" in warning, warning
        assert "No space left on device" in warning and len(warning.splitlines()) == 1, warning

        timed = _result(rt.krex("run", "--json", "--timeout", "3", "--", PY, "-c", WRITES_THEN_HANGS, timeout=60))
        assert timed["state"] == "timeout", timed
        assert timed["output_lost"] == {"stdout": BYTES, "stderr": 0} and len(timed["stdout"]) == BYTES, timed["output_lost"]

        hanging = rt.krex("submit", "--", PY, "-c", WRITES_THEN_HANGS, str(rt.root / "wrote-1")).stdout.strip()
        wait_until((rt.root / "wrote-1").exists, 30, "its output to be drained")
        assert rt.krex("cancel", hanging).returncode == 0
        cancelled = _result(rt.krex("wait", "--json", hanging, timeout=60))
        assert cancelled["state"] == "cancelled" and cancelled["output_lost"]["stdout"] == BYTES, cancelled

        last = rt.krex("submit", "--", PY, "-c", WRITES_THEN_HANGS, str(rt.root / "wrote-2")).stdout.strip()
        wait_until((rt.root / "wrote-2").exists, 30, "its output to be drained")
        assert rt.stop(signal.SIGTERM) == 0  # the stop is not held up by the full disk either
    ends = {e["id"]: e for e in read_trace(rt.trace_path).events if e["type"] == "command_finished"}
    assert ends[last]["state"] == "cancelled" and ends[last]["output_lost"] == {"stdout": BYTES, "stderr": 0}
    assert ends[timed["id"]]["output_lost"]["stdout"] == BYTES

