"""What a runtime refuses before it serves, each in one line with exit 125,
leaving nothing behind (no sockets, claims, cgroups or processes): a trace
path that is no regular file, and config values that would break the node
or its tenants."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from runtime_helpers import start_refused

from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, command


def _nothing_left(rt: Runtime, before: hygiene.Baseline) -> None:
    assert hygiene.leftovers(rt.run_dir, rt.lock_dir, before) == []
    if rt.run_dir.exists():
        assert not [p for p in rt.run_dir.iterdir() if p.is_socket()]


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_trace_path_that_is_no_regular_file_is_refused(tmp_path: Path, native_built: Path, kind: str) -> None:
    """A FIFO once blocked the start for good (the open waits for a reader),
    deaf to SIGTERM, with the three sockets already bound."""
    before = hygiene.baseline()
    if kind == "fifo":
        trace = tmp_path / "trace.fifo"
        os.mkfifo(trace)
        what = "a FIFO"
    elif kind == "device":
        trace, what = Path("/dev/null"), "a character device"
    else:
        trace = tmp_path / "trace.d"
        trace.mkdir()
        what = "a folder"
    rt = Runtime(tmp_path / "rt", sim=1, policy="krex")
    line = start_refused(rt, "--trace", str(trace))
    assert line == f"krex-runtime: cannot write the trace {trace}: it is {what}, not a regular file", line
    _nothing_left(rt, before)


@pytest.mark.parametrize(
    "setting, message",
    [
        ("[tenants]\noutput_dir = '/proc'\n", "tenants.output_dir = '/proc' is in /proc"),
        (f"[regions.cpu_slices]\n0 = [{max(os.sched_getaffinity(0)) + 1}]\n", "regions.cpu_slices.0 names core"),
        ("[runtime.labels]\nzone = \"a\\nb\"\n", "runtime.labels.'zone': names and values may hold only printable"),
        ("[tenants]\nuser = 'root'\nuid_range = [70000, 4096]\ngroup = '70000'\n", "tenants.user = 'root' with tenants.uid_range"),
    ],
    ids=["output-in-proc", "no-such-core", "label-newline", "root-range"],
)
def test_a_config_this_node_cannot_use_stops_the_start_in_one_line(
    tmp_path: Path, native_built: Path, setting: str, message: str
) -> None:
    """Each of these was accepted: every command lost its output to /proc,
    tenants were pinned to cores that do not exist, a label forged a line of
    `krex status`, tenants of a uid range were put in root's group."""
    before = hygiene.baseline()
    run_dir, lock_dir = tmp_path / "run", tmp_path / "locks"
    config = tmp_path / "krex.toml"
    # Each section once: the setting's own table comes after the plain keys.
    plain = f"[runtime]\nrun_dir = '{run_dir}'\nlock_dir = '{lock_dir}'\n[telemetry]\ncanary = false\n"
    config.write_text(plain + setting)
    done = subprocess.run([*command("krex-runtime"), "--config", str(config), "--sim", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 125, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"krex-runtime: {config}: {message}"), done.stderr
    assert hygiene.leftovers(run_dir, lock_dir, before) == [] and not run_dir.exists()
