"""The event table of unprotected-timing detection (native/src/intercept/intercept_events.c)
against a tenant holding many live events, as a harness does that records
thousands of windows and reads every elapsed time at the end (triton's
do_bench). The test plays the runtime: a gate, and a region channel that
closes it for the tenant at ENTER and reopens it at EXIT; the library's
report is a plain file here (the runtime's is a pipe), one byte a timing:
`u` unprotected, `t` untracked."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from krex_native import Build, check_sanitizers, read_stats
from runtime_helpers import Heartbeat
from test_region_api import LineServer

from krex_runtime.regions.gate import core as gate
from krex_runtime.sim.device_file import remove_device

TENANT = 5
_names = itertools.count()


@pytest.fixture
def sim_device() -> Iterator[str]:
    name = f"krex-events-test-{os.getpid()}-{next(_names)}"
    yield name
    remove_device(name)


def run_event_table(build: Build, tmp_path: Path, device: str, pairs: int) -> tuple[bytes, dict]:
    """Run event_table PAIRS under a gate: (the report's bytes, the stats' events)."""
    g = gate.Gate.create(tmp_path / "gpu0.gate", max_procs=16)
    g.add_tenant(TENANT)
    beat = Heartbeat(g)

    def reply(line: str) -> str:
        if line.startswith("HELLO "):
            return "OK"
        if line.startswith("ENTER "):
            g.close_gate(TENANT)
            return "GRANTED 1"
        if line.startswith("EXIT"):
            g.open_gate()
            return "RELEASED 1"
        return "ERROR EPROTO unknown request"

    server = LineServer(tmp_path / "region.sock", reply)
    report, stats = tmp_path / "unprotected", tmp_path / "stats.jsonl"
    report.write_bytes(b"")
    try:
        env = build.env(KREX_GATE_PATH=str(g.path), KREX_TENANT_ID=str(TENANT), KREX_SIM_DEVICE=device,
                        KREX_REGION_SOCKET=str(server.path), KREX_UNPROTECTED_TIMINGS=str(report),
                        KREX_INTERCEPT_STATS=str(stats))
        done = subprocess.run([str(build.tool("event_table")), str(pairs)], env=env, capture_output=True,
                              text=True, timeout=300)
    finally:
        server.close()
        beat.stop()
        g.open_gate()
        g.detach()
    check_sanitizers(done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "expected 1"
    [line] = read_stats(stats)
    return report.read_bytes(), line["events"]


def test_thousands_of_live_events_are_tracked(build: Build, tmp_path: Path, sim_device: str) -> None:
    # 6000 windows read at the end: 12000 live events, three times the first
    # segment of the table. Every timing inside the region is protected; the
    # one outside is counted, exactly.
    report, events = run_event_table(build, tmp_path, sim_device, 6000)
    assert report == b"u"
    assert (events["unprotected"], events["untracked"], events["event_table_full"]) == (1, 0, 0)


def test_events_beyond_the_table_are_untracked_never_unprotected(build: Build, tmp_path: Path,
                                                                 sim_device: str) -> None:
    # 30000 windows: 60000 live events, more than the table's 36864 slots. The
    # records it has no room for are dropped (nothing is evicted), and a
    # timing with one is untracked: known neither way, never an accusation.
    report, events = run_event_table(build, tmp_path, sim_device, 30000)
    assert report.count(b"u") == 1 and events["unprotected"] == 1
    untracked = report.count(b"t")
    assert 0 < untracked < 30000 and events["untracked"] == untracked
    assert len(report) == 1 + untracked
    assert events["event_table_full"] > 0
