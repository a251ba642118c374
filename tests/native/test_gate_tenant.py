"""The gate against real tenant processes on the simulated driver.

A tenant with 4 submitting threads (a C program linked with -lcuda, and a
Python program using ctypes) runs with libkrex.so preloaded; the test plays
the runtime through krex_runtime/regions/gate/core.py: close, wait until nobody is inside
a driver call, drain, check that the tenant is parked and makes no progress,
reopen, check that it finishes. The simulator's execution log is the witness
of what ran when. No timing assertions: every wait is a bounded poll for a
state, never a claim about how long something took.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from krex_native import Build, check_sanitizers, read_stats
from runtime_helpers import Heartbeat

from krex_runtime.regions.gate import core as gate
from krex_runtime.regions.gate import header_layout as gate_layout
from krex_runtime.sim.device_file import remove_device
from krex_runtime.sim.execution_log import read_execution_log
from krex_runtime.sim.layout import KIND_KERNEL
from krex_runtime.testing.local_runtime import wait_until

TENANT = 1
HOLDER = 99
THREADS = 4
_names = itertools.count()


class Tenant:
    def __init__(self, proc: subprocess.Popen, stderr_path: Path, stats_path: Path) -> None:
        self.proc, self.stderr_path, self.stats_path = proc, stderr_path, stats_path

    def wait_ready(self) -> None:
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"tenant said {line!r}; stderr:\n{self.stderr()}"

    def finish(self) -> str:
        """Close stdin (the tenant's stop signal) and return its last line."""
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        rc = self.proc.wait(timeout=120)
        err = self.stderr()
        check_sanitizers(err)
        assert rc == 0, f"tenant exited {rc}:\n{err[-3000:]}"
        return out.strip().splitlines()[-1]

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""


@pytest.fixture
def sim_device() -> Iterator[str]:
    name = f"krex-gate-test-{os.getpid()}-{next(_names)}"
    yield name
    remove_device(name)


PY_TENANT = r"""
import sys, threading
from krex_runtime.sim.layout import CU_STREAM_NON_BLOCKING
from krex_runtime.sim.simcuda import SimCuda
cuda = SimCuda()
stop = threading.Event()
counts = [0] * 4
ready = threading.Barrier(5)
def work(i):
    cuda.make_current()
    s = cuda.stream(CU_STREAM_NON_BLOCKING)
    n = 0
    while not stop.is_set():
        (cuda.launch if i % 2 else cuda.launch_ex)(int(sys.argv[1]), stream=s)
        n += 1
        if n == 1:
            ready.wait()
        if n % 4 == 0:
            cuda.stream_synchronize(s)
    cuda.stream_synchronize(s)
    counts[i] = n
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads: t.start()
ready.wait()
print("ready", flush=True)
sys.stdin.read()
stop.set()
for t in threads: t.join()
print("done", sum(counts), flush=True)
"""


def start_tenant(kind: str, build: Build, tmp_path: Path, gate_path: Path, device: str,
                 kernel_ns: int) -> Tenant:
    stderr_path = tmp_path / f"tenant-{kind}.err"
    stats_path = tmp_path / f"stats-{kind}.jsonl"
    env = build.env(
        python_host=kind == "python",
        KREX_GATE_PATH=str(gate_path), KREX_TENANT_ID=str(TENANT), KREX_SIM_DEVICE=device,
        KREX_SIM_LOG=str(tmp_path / "sim.log"), KREX_INTERCEPT_STATS=str(stats_path),
    )
    if kind == "c":
        argv = [str(build.tool("linked_tenant")), str(THREADS), "0", str(kernel_ns), "4"]
    else:
        script = tmp_path / "py_tenant.py"
        script.write_text(PY_TENANT)
        argv = [sys.executable, str(script), str(kernel_ns)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=stderr_path.open("w"), env=env, text=True)
    tenant = Tenant(proc, stderr_path, stats_path)
    tenant.wait_ready()
    return tenant


def the_entry(g: gate.Gate, pid: int) -> gate.ProcEntry:
    entries = [e for e in g.processes() if e.pid == pid]
    assert len(entries) == 1, g.processes()
    return entries[0]


@pytest.mark.parametrize("kind", ["c", "python"])
def test_tenant_parks_drains_and_resumes(kind: str, build: Build, tmp_path: Path, sim_device: str) -> None:
    gate_path = tmp_path / "gpu0.gate"
    g = gate.Gate.create(gate_path, max_procs=16)
    g.add_tenant(TENANT)
    beat = Heartbeat(g)
    tenant = start_tenant(kind, build, tmp_path, gate_path, sim_device, kernel_ns=2_000_000)
    pid = tenant.proc.pid
    try:
        wait_until(lambda: any(e.pid == pid for e in g.processes()), 60, "tenant registered", interval_s=0.01)
        wait_until(lambda: the_entry(g, pid).calls["launch"] >= 8, 60, "some launches", interval_s=0.01)

        g.close_gate(HOLDER)
        assert g.wait_quiescent(HOLDER, 30.0) == []
        outcomes = g.drain(HOLDER, 60.0)
        assert [(o.pid, o.result) for o in outcomes] == [(pid, "ok")]
        drained = the_entry(g, pid)

        # Parked within one submission: every thread waits at the gate, none inside.
        wait_until(lambda: the_entry(g, pid).parked == THREADS, 60, "all threads parked", interval_s=0.01)
        assert the_entry(g, pid).in_call == 0
        before = the_entry(g, pid).calls_total
        time.sleep(0.3)
        assert the_entry(g, pid).calls_total == before, "submitted through a closed gate"

        reopened_ns = time.monotonic_ns()  # taken before the reopening store
        g.open_gate()
        wait_until(lambda: the_entry(g, pid).calls_total > before + THREADS, 60, "progress after reopening", interval_s=0.01)
        wait_until(lambda: the_entry(g, pid).parked == 0, 60, "nobody parked", interval_s=0.01)
        last = tenant.finish()
    finally:
        beat.stop()
        if tenant.proc.poll() is None:
            tenant.proc.kill()
            tenant.proc.wait()

    # The simulator's log: none of the tenant's work ran between the drain's
    # acknowledgement and the reopening, and all work in flight at the close
    # ended before the acknowledgement.
    records = [r for r in read_execution_log(tmp_path / "sim.log")
               if r.pid == pid and r.kind == KIND_KERNEL]
    assert drained.drain_ack_ns > 0
    overlapping = [r for r in records if r.end_ns > drained.drain_ack_ns and r.start_ns < reopened_ns]
    assert overlapping == []
    assert any(r.end_ns <= drained.drain_ack_ns for r in records)
    assert any(r.start_ns >= reopened_ns for r in records)

    # The library saw every launch the program made.
    launches = int(last.split()[1])
    stats = read_stats(tenant.stats_path)
    assert len(stats) == 1 and stats[0]["pid"] == pid
    assert stats[0]["classes"]["launch"] == launches
    assert len(records) == launches
    assert stats[0]["events"]["parked"] >= THREADS
    assert stats[0]["events"]["unmapped"] == 0
    g.detach()


def test_stale_heartbeat_releases_parked_threads(build: Build, tmp_path: Path, sim_device: str) -> None:
    gate_path = tmp_path / "gpu0.gate"
    g = gate.Gate.create(gate_path, max_procs=16, stale_after_s=0.5, park_wait_s=0.02)
    g.add_tenant(TENANT)
    beat = Heartbeat(g)
    tenant = start_tenant("c", build, tmp_path, gate_path, sim_device, kernel_ns=200_000)
    pid = tenant.proc.pid
    try:
        wait_until(lambda: any(e.pid == pid for e in g.processes()), 60, "tenant registered", interval_s=0.01)
        g.close_gate(HOLDER)
        assert g.wait_quiescent(HOLDER, 30.0) == []
        wait_until(lambda: the_entry(g, pid).parked == THREADS, 60, "all threads parked", interval_s=0.01)
        before = the_entry(g, pid).calls_total
        beat.stop()  # the runtime "dies": nobody stamps the heartbeat any more
        wait_until(lambda: the_entry(g, pid).calls_total > before + THREADS, 60, "progress through the stale gate", interval_s=0.01)
        assert g.is_closed
        wait_until(lambda: the_entry(g, pid).parked == 0, 60, "nobody parked", interval_s=0.01)
        assert the_entry(g, pid).fail_open
        tenant.finish()
    finally:
        beat.stop()
        if tenant.proc.poll() is None:
            tenant.proc.kill()
            tenant.proc.wait()
    assert tenant.stderr().count("gate failing open") == 1
    assert "krex: runtime heartbeat stale for " in tenant.stderr()
    g.detach()


def test_holder_passes_its_own_closed_gate(normal_build: Build, tmp_path: Path, sim_device: str) -> None:
    gate_path = tmp_path / "gpu0.gate"
    g = gate.Gate.create(gate_path, max_procs=16)
    g.add_tenant(TENANT)
    beat = Heartbeat(g)
    g.close_gate(TENANT)  # the tenant itself holds the region
    try:
        env = normal_build.env(KREX_GATE_PATH=str(gate_path), KREX_TENANT_ID=str(TENANT),
                               KREX_SIM_DEVICE=sim_device)
        proc = subprocess.run([str(normal_build.tool("linked_tenant")), "2", "20", "10000", "4"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split()[-1] == "40"
    finally:
        beat.stop()
        g.open_gate()
        g.detach()


def test_gate_absent_or_foreign_runs_ungated(normal_build: Build, tmp_path: Path, sim_device: str) -> None:
    junk = tmp_path / "junk.gate"
    junk.write_bytes(b"\0" * gate_layout.HEADER_SIZE)
    without_entries = gate.Gate.create(tmp_path / "alone.gate")  # no entries file for tenant 1
    for path, message in ((tmp_path / "missing.gate", "cannot open gate"), (junk, "another layout"),
                          (without_entries.path, "cannot open this tenant's gate entries")):
        env = normal_build.env(KREX_GATE_PATH=str(path), KREX_TENANT_ID="1", KREX_SIM_DEVICE=sim_device)
        proc = subprocess.run([str(normal_build.tool("linked_tenant")), "2", "5", "1000", "4"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert message in proc.stderr and "running ungated" in proc.stderr


def test_a_thread_inside_context_creation_is_not_waited_for_and_parks_after(
        build: Build, tmp_path: Path, sim_device: str) -> None:
    gate_path = tmp_path / "gpu0.gate"
    g = gate.Gate.create(gate_path, max_procs=16)
    g.add_tenant(TENANT)
    beat = Heartbeat(g)
    env = build.env(python_host=True, KREX_GATE_PATH=str(gate_path), KREX_TENANT_ID=str(TENANT),
                    KREX_SIM_DEVICE=sim_device, KREX_SIM_LOG=str(tmp_path / "sim.log"))
    script = Path(__file__).resolve().parent.parent / "tenants" / "startup.py"
    proc = subprocess.Popen([sys.executable, str(script), "--warm", "--ctx-ms", "3000", "--kernels", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert proc.stdout.readline().startswith("creating")
        pid = proc.pid
        wait_until(lambda: the_entry(g, pid).in_call == 1, 60, "the thread inside cuCtxCreate", interval_s=0.01)
        inside = the_entry(g, pid)
        assert inside.in_class == {"context": 1} and inside.in_perturbing == 0
        g.close_gate(HOLDER)
        assert g.wait_quiescent(HOLDER, 0.0) == []  # nothing that perturbs
        assert [e.pid for e in g.wait_quiescent(HOLDER, 0.05, every_call=True)] == [pid]
        assert [(o.pid, o.result) for o in g.drain(HOLDER, 60.0)] == [(pid, "ok")]
        # The call returns while the gate is shut; the next gated one (a module load) parks.
        assert proc.stdout.readline().startswith("created")
        wait_until(lambda: the_entry(g, pid).parked == 1, 60, "the call after it parked", interval_s=0.01)
        parked = the_entry(g, pid)
        assert parked.in_call == 0 and parked.in_class == {}
        reopened_ns = time.monotonic_ns()
        g.open_gate()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "done" in out, err
    finally:
        beat.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    kernels = [r for r in read_execution_log(tmp_path / "sim.log") if r.pid == pid and r.kind == KIND_KERNEL]
    assert len(kernels) == 2 and kernels[-1].start_ns >= reopened_ns  # warm-up, then the one that parked
    g.detach()
