"""Tests of the simulated CUDA driver (native/src/simcuda/).

Every test runs real processes against the built libcuda.so.1, each on its
own shared simulated device (KREX_SIM_DEVICE from the test's tmp_path), and
checks relations in the execution log and in event timings, never absolute
times: the machine is noisy. Some tests also run with the interception
library preloaded (the stack tenants really use); the ASan/UBSan build runs
a mixed workload at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from krex_runtime.sim import device_file, driver, execution_log, layout, simcuda

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"
MS = 1_000_000

PREAMBLE = """
import ctypes, os, sys, time, struct
from krex_runtime.sim import device_file, driver, execution_log, layout, simcuda

def wait_go():
    # Barrier: report ready, then start when the test creates GO_FILE.
    print("ready", flush=True)
    while not os.path.exists(os.environ["GO_FILE"]):
        time.sleep(0.001)
"""


def _make(*targets: str) -> None:
    proc = subprocess.run(["make", "-s", "-C", str(NATIVE), *targets], capture_output=True, text=True)
    assert proc.returncode == 0, f"make {' '.join(targets)} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="session")
def sim_dir() -> Path:
    _make("sim")
    lib = NATIVE / "build" / "sim" / "libcuda.so.1"
    assert lib.exists() and (lib.parent / "libcuda.so").exists()
    return lib.parent


@pytest.fixture(scope="session")
def sim_asan_dir() -> Path:
    _make("sim-asan")
    return NATIVE / "build" / "asan" / "sim"


@pytest.fixture(scope="session")
def libkrex() -> Path | None:
    """The interception library, if it builds; tests of the full stack need it."""
    proc = subprocess.run(["make", "-s", "-C", str(NATIVE), "build/libkrex.so"], capture_output=True, text=True)
    lib = NATIVE / "build" / "libkrex.so"
    return lib if proc.returncode == 0 and lib.exists() else None


@dataclass
class Sim:
    """One test's simulated device: environment, log and helpers to run tenants."""

    name: str
    env: dict[str, str]
    log: Path
    tmp: Path

    def with_env(self, **extra: str) -> dict[str, str]:
        return {**self.env, **extra}

    def run(self, code: str, timeout: float = 60, **extra: str) -> str:
        proc = subprocess.run([sys.executable, "-c", PREAMBLE + textwrap.dedent(code)],
                              env=self.with_env(**extra), capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"tenant failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def spawn(self, code: str, **extra: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", PREAMBLE + textwrap.dedent(code)],
                                env=self.with_env(**extra), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def records(self, kind: int | None = None) -> list[execution_log.Record]:
        rs = execution_log.read_execution_log(self.log)
        return [r for r in rs if kind is None or r.kind == kind]


def _base_env(sim_lib_dir: Path, name: str, log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KREX_") and k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
    env.update({
        "PYTHONPATH": str(REPO),
        "LD_LIBRARY_PATH": str(sim_lib_dir),
        layout.ENV_DEVICE: name,
        layout.ENV_LOG: str(log),
    })
    return env


@pytest.fixture
def sim(tmp_path: Path, sim_dir: Path):
    name = f"test-{os.getpid()}-{tmp_path.name}"
    s = Sim(name, _base_env(sim_dir, name, tmp_path / "exec.log"), tmp_path / "exec.log", tmp_path)
    yield s
    device_file.remove_device(name)


@pytest.fixture(params=["sim", "preloaded"])
def stack(request, sim: Sim, libkrex: Path | None) -> Sim:
    """The simulator alone, and with the interception library preloaded."""
    if request.param == "preloaded":
        if libkrex is None:
            pytest.skip("the interception library does not build here")
        sim.env["LD_PRELOAD"] = str(libkrex)
    return sim


def _wait_ready(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        line = p.stdout.readline()
        assert line.strip() == "ready", f"tenant did not start: {line!r} {p.stderr.read() if p.poll() is not None else ''}"


def _finish(procs: list[subprocess.Popen], timeout: float = 60) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"tenant failed ({p.returncode}):\n{out}\n{err}"
        outs.append(out)
    return outs


# ---------------------------------------------------------------------------
# Build, exports, layout
# ---------------------------------------------------------------------------

def test_exports_versioned_and_legacy_names_only(sim_dir: Path):
    out = subprocess.run(["nm", "-D", "--defined-only", str(sim_dir / "libcuda.so.1")],
                         capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.split()[1] in "TtWw"}
    # Besides the driver's entry points only the simulator's own, declared in krex_simcuda.h.
    own = {"krex_sim_set_tenant"}
    assert all(n.startswith("cu") or n in own for n in names), sorted(n for n in names if not n.startswith("cu"))
    for n in ["cuInit", "cuDriverGetVersion", "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4",
              "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds",
              "cuMemcpyHtoDAsync_v2_ptsz", "cuMemsetD32_v2", "cuMemsetD8Async", "cuLaunchKernel",
              "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuCtxSynchronize",
              "cuCtxSynchronize_v2", "cuStreamSynchronize_ptsz", "cuEventElapsedTime", "cuEventElapsedTime_v2",
              "cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable", "cuDeviceGetUuid",
              "cuDeviceGetUuid_v2", "cuDevicePrimaryCtxRelease_v2", "cuCheckpointProcessLock",
              "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState", "cuGraphLaunch"]:
        assert n in names, n
    soname = subprocess.run(["readelf", "-d", str(sim_dir / "libcuda.so.1")], capture_output=True, text=True).stdout
    assert "[libcuda.so.1]" in soname


def test_python_layout_matches_header(tmp_path: Path):
    prog = tmp_path / "layout.c"
    prog.write_text(textwrap.dedent("""
        #include <stddef.h>
        #include <stdio.h>
        #include "krex_simcuda.h"
        #define P(e) printf(#e " %zu\\n", (size_t)(e))
        int main(void) {
            P(sizeof(struct krex_sim_log_record));
            P(offsetof(struct krex_sim_log_record, stream_id));
            P(offsetof(struct krex_sim_log_record, start_ns));
            P(offsetof(struct krex_sim_log_record, grid));
            P(offsetof(struct krex_sim_log_record, name));
            P(sizeof(struct krex_sim_proc_slot));
            P(offsetof(struct krex_sim_proc_slot, active));
            P(offsetof(struct krex_sim_proc_slot, mem_used));
            P(offsetof(struct krex_sim_proc_slot, work_items));
            P(sizeof(struct krex_sim_device_info));
            P(offsetof(struct krex_sim_shm, devices));
            P(offsetof(struct krex_sim_shm, procs));
            P(offsetof(struct krex_sim_shm, heat));
            P(offsetof(struct krex_sim_shm, load));
            P(sizeof(struct krex_sim_device_load));
            P(offsetof(struct krex_sim_device_load, busy_ns));
            P(offsetof(struct krex_sim_device_load, temp_mc));
            P(offsetof(struct krex_sim_device_load, seq_end));
            P(offsetof(struct krex_sim_shm, reaped_seq));
            P(offsetof(struct krex_sim_shm, reaped));
            P(sizeof(struct krex_sim_reaped));
            P(offsetof(struct krex_sim_reaped, work_items));
            P(KREX_SIM_REAPED_MAX);
            P(sizeof(struct krex_sim_shm));
            P(KREX_SIM_TOP_SM_CLOCK_MHZ); P(KREX_SIM_BASE_SM_CLOCK_MHZ); P(KREX_SIM_AMBIENT_C); P(KREX_SIM_LOAD_RISE_C); P(KREX_SIM_HEAT_TAU_MS);
            P(KREX_SIM_HEAT_STEP_NS); P(KREX_SIM_BOOST_KNEE_C); P(KREX_SIM_BOOST_BIN_C); P(KREX_SIM_BOOST_BIN_MHZ);
            P(KREX_SIM_MAX_DEVICES); P(KREX_SIM_MAX_PROCS); P(KREX_SIM_LOG_NAME_LEN);
            P(KREX_SIM_SHM_MAGIC); P(KREX_SIM_SHM_VERSION); P(KREX_SIM_LOG_MAGIC); P(KREX_SIM_LOG_VERSION);
            P(KREX_SIM_LOG_KERNEL); P(KREX_SIM_LOG_LOCK); P(KREX_SIM_LOG_UNLOCK); P(KREX_SIM_LOG_LOCK_TIMEOUT);
            return 0;
        }
    """))
    exe = tmp_path / "layout"
    subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Werror", f"-I{NATIVE / 'include'}",
                    str(prog), "-o", str(exe)], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                              check=True).stdout.splitlines())
    got = {k: int(v) for k, v in got.items()}
    rec = layout.LOG_RECORD
    assert got["sizeof(struct krex_sim_log_record)"] == rec.size == 128
    assert got["offsetof(struct krex_sim_log_record, stream_id)"] == 24
    assert got["offsetof(struct krex_sim_log_record, start_ns)"] == 32
    assert got["offsetof(struct krex_sim_log_record, grid)"] == 64
    assert got["offsetof(struct krex_sim_log_record, name)"] == rec.size - layout.LOG_NAME_LEN
    assert got["sizeof(struct krex_sim_proc_slot)"] == layout.PROC_SLOT.size
    assert got["offsetof(struct krex_sim_proc_slot, active)"] == 40
    assert got["offsetof(struct krex_sim_proc_slot, mem_used)"] == 40 + 4 * layout.MAX_DEVICES
    assert got["offsetof(struct krex_sim_proc_slot, work_items)"] == 40 + 12 * layout.MAX_DEVICES + 16
    assert got["sizeof(struct krex_sim_device_info)"] == layout.DEVICE_INFO.size
    assert got["offsetof(struct krex_sim_shm, devices)"] == layout.DEVICES_OFFSET
    assert got["offsetof(struct krex_sim_shm, procs)"] == layout.PROCS_OFFSET
    assert got["offsetof(struct krex_sim_shm, heat)"] == 28  # the header's seventh field
    assert got["offsetof(struct krex_sim_shm, load)"] == layout.LOAD_OFFSET
    assert got["sizeof(struct krex_sim_device_load)"] == layout.DEVICE_LOAD.size == 64
    assert got["offsetof(struct krex_sim_device_load, busy_ns)"] == 8
    assert got["offsetof(struct krex_sim_device_load, temp_mc)"] == 32
    assert got["offsetof(struct krex_sim_device_load, seq_end)"] == 60
    assert got["sizeof(struct krex_sim_shm)"] == layout.SHM_SIZE
    heat = ("TOP_SM_CLOCK_MHZ", "BASE_SM_CLOCK_MHZ", "AMBIENT_C", "LOAD_RISE_C", "HEAT_TAU_MS", "HEAT_STEP_NS", "BOOST_KNEE_C",
            "BOOST_BIN_C", "BOOST_BIN_MHZ")
    assert {k: got[f"KREX_SIM_{k}"] for k in heat} == {k: getattr(layout, k) for k in heat}
    assert got["offsetof(struct krex_sim_shm, reaped_seq)"] == layout.REAPED_SEQ_OFFSET
    assert got["offsetof(struct krex_sim_shm, reaped)"] == layout.REAPED_OFFSET
    assert got["sizeof(struct krex_sim_reaped)"] == layout.REAPED.size
    assert got["offsetof(struct krex_sim_reaped, work_items)"] == layout.REAPED.size - 8 * layout.MAX_DEVICES
    assert got["KREX_SIM_REAPED_MAX"] == layout.REAPED_MAX
    assert got["KREX_SIM_MAX_DEVICES"] == layout.MAX_DEVICES
    assert got["KREX_SIM_MAX_PROCS"] == layout.MAX_PROCS
    assert got["KREX_SIM_LOG_NAME_LEN"] == layout.LOG_NAME_LEN
    assert got["KREX_SIM_SHM_MAGIC"] == layout.SHM_MAGIC
    assert got["KREX_SIM_SHM_VERSION"] == layout.SHM_VERSION
    assert got["KREX_SIM_LOG_MAGIC"] == layout.LOG_MAGIC
    assert got["KREX_SIM_LOG_VERSION"] == layout.LOG_VERSION
    assert (got["KREX_SIM_LOG_KERNEL"], got["KREX_SIM_LOG_LOCK"], got["KREX_SIM_LOG_UNLOCK"],
            got["KREX_SIM_LOG_LOCK_TIMEOUT"]) == (layout.KIND_KERNEL, layout.KIND_LOCK, layout.KIND_UNLOCK, layout.KIND_LOCK_TIMEOUT)


# ---------------------------------------------------------------------------
# The shared device
# ---------------------------------------------------------------------------

def test_device_creation_race_eight_processes(sim: Sim):
    go = sim.tmp / "go"
    code = """
        wait_go()
        s = simcuda.SimCuda()
        print(s.device_count(), s.device_uuid(), s.device_name(), flush=True)
        s.launch(1 * 1000 * 1000)
        s.synchronize()
    """
    procs = [sim.spawn(code, GO_FILE=str(go), KREX_SIM_GPUS="2") for _ in range(8)]
    _wait_ready(procs)
    go.touch()
    outs = [o.split(maxsplit=2) for o in _finish(procs)]
    assert {o[0] for o in outs} == {"2"}
    assert len({o[1] for o in outs}) == 1, "all processes see the same device"
    assert "simulator" in outs[0][2]
    state = device_file.read_device(sim.name)
    assert state.num_devices == 2 and state.uuids[0] == outs[0][1]
    assert len(state.slots) == 8 and len({s.pid for s in state.slots}) == 8
    assert len(sim.records(layout.KIND_KERNEL)) == 8


def test_visible_devices(sim: Sim):
    sim.run("simcuda.SimCuda()", KREX_SIM_GPUS="3")  # creates the device with 3 GPUs
    uuids = device_file.read_device(sim.name).uuids
    out = sim.run("s = simcuda.SimCuda(); print(s.device_count(), s.device_uuid())", CUDA_VISIBLE_DEVICES="2,0")
    assert out.split() == ["2", uuids[2]]
    out = sim.run("s = simcuda.SimCuda(); print(s.device_count(), s.device_uuid())",
                  CUDA_VISIBLE_DEVICES=f"{uuids[1][:12]},7,0")
    assert out.split() == ["1", uuids[1]], "the list ends at the first invalid entry"
    out = sim.run("""
        d = driver.Driver()
        print(d.raw("cuInit", 0))
    """, CUDA_VISIBLE_DEVICES="")
    assert out.split() == ["100"]  # CUDA_ERROR_NO_DEVICE


def test_a_device_made_with_fewer_gpus_grows_to_what_a_later_runtime_serves(sim: Sim):
    """A runtime serving 3 GPUs finds the device file a 2-GPU runtime made: its
    tenants of GPU 2 must not fail cuInit (CUDA_ERROR_NO_DEVICE)."""
    sim.run("simcuda.SimCuda()", KREX_SIM_GPUS="2")
    before = device_file.read_device(sim.name)
    assert before.num_devices == 2
    out = sim.run("s = simcuda.SimCuda(); print(s.device_count(), s.device_uuid())",
                  KREX_SIM_GPUS="3", CUDA_VISIBLE_DEVICES="2")
    after = device_file.read_device(sim.name)
    assert after.num_devices == 3 and out.split() == ["1", after.uuids[2]]
    assert after.uuids[:2] == before.uuids[:2], "devices already there keep their identity"
    # A process asking for fewer (or not saying) leaves it as it is.
    sim.run("simcuda.SimCuda()", KREX_SIM_GPUS="1")
    sim.run("simcuda.SimCuda()")
    assert device_file.read_device(sim.name).num_devices == 3


def test_data_round_trip(stack: Sim):
    out = stack.run("""
        s = simcuda.SimCuda()
        free0, total = s.mem_info()
        n = 1 << 20
        a, b = s.alloc(n), s.alloc(n)
        assert s.mem_info()[0] <= free0 - 2 * n
        data = os.urandom(n)
        s.copy_htod(a, data)
        assert s.copy_dtoh(a, n) == data
        s.copy_dtod(b, a, n)
        assert s.copy_dtoh(b, n) == data
        s.memset_d32(b, 0xdeadbeef, 16)
        assert s.copy_dtoh(b, 64) == struct.pack("<I", 0xdeadbeef) * 16
        s.memset_d8(b, 7, 3)
        assert s.copy_dtoh(b, 4) == bytes([7, 7, 7, 0xde])
        st = s.stream()
        s.copy_htod(a, b"xyz" * 100, stream=st, asynchronous=True)
        s.memset_d32(a + 300, 1, 1, stream=st, asynchronous=True)
        s.stream_synchronize(st)
        assert s.copy_dtoh(a, 304) == b"xyz" * 100 + struct.pack("<I", 1)
        s.free(a); s.free(b)
        assert s.mem_info()[0] == free0
        print("ok")
    """)
    assert out.strip() == "ok"
    kinds = {r.kind for r in stack.records()}
    assert {layout.KIND_MEMCPY_HTOD, layout.KIND_MEMCPY_DTOH, layout.KIND_MEMCPY_DTOD, layout.KIND_MEMSET} <= kinds
    htod = [r for r in stack.records(layout.KIND_MEMCPY_HTOD) if r.bytes == 1 << 20]
    assert htod and htod[0].solo_ns > 0


def test_launch_is_asynchronous_and_synchronize_waits(stack: Sim):
    out = stack.run("""
        s = simcuda.SimCuda()
        c = s.counter()
        st = s.stream()
        for _ in range(4):
            s.launch(40 * 1000 * 1000, stream=st, counter=c, name="queued")
        # all four were accepted before the first one could have finished
        busy = not s.stream_done(st)
        s.stream_synchronize(st)
        print(busy, s.stream_done(st), s.read_u64(c))
        s.launch_ex(5 * 1000 * 1000, counter=c, grid=(4, 2, 1), block=(128, 1, 1), name="ex")
        s.synchronize()
        print(s.read_u64(c))
    """, KREX_TENANT_ID="42")
    first, second = out.split("\n")[:2]
    assert first.split() == ["True", "True", "4"]
    assert second.strip() == "5"
    queued = [r for r in stack.records(layout.KIND_KERNEL) if r.name == "queued"]
    assert len(queued) == 4 and all(r.tenant_id == 42 for r in queued)
    # in order, one after the other, on one stream
    assert all(a.end_ns <= b.start_ns for a, b in zip(queued, queued[1:]))
    ex = [r for r in stack.records(layout.KIND_KERNEL) if r.name == "ex"]
    assert ex and ex[0].grid == (4, 2, 1) and ex[0].block == (128, 1, 1) and ex[0].solo_ns == 5 * MS


def test_event_times_follow_durations(sim: Sim):
    out = sim.run("""
        s = simcuda.SimCuda()
        short = s.time_kernel(10 * 1000 * 1000, repeats=3)
        long = s.time_kernel(40 * 1000 * 1000, repeats=3)
        print(min(short), min(long))
    """)
    short, long = map(float, out.split())
    assert short >= 10 * 0.95 and long >= 40 * 0.95, "a kernel never runs faster than its solo time"
    assert 2.5 < long / short < 6, (short, long)


def test_stream_wait_event_orders_streams(sim: Sim):
    sim.run("""
        s = simcuda.SimCuda()
        a, b = s.stream(), s.stream()
        e = s.event()
        s.launch(60 * 1000 * 1000, stream=a, name="producer")
        s.record(e, a)
        s.wait_event(b, e)
        s.launch(1 * 1000 * 1000, stream=b, name="consumer")
        s.synchronize()
    """)
    ks = {r.name: r for r in sim.records(layout.KIND_KERNEL)}
    assert ks["consumer"].start_ns >= ks["producer"].end_ns


def test_concurrent_kernels_from_processes_share_the_device(stack: Sim):
    go = stack.tmp / "go"
    code = """
        s = simcuda.SimCuda()
        start, end = s.event(), s.event()
        wait_go()
        s.record(start)
        for _ in range(2):
            s.launch(60 * 1000 * 1000, name="contended")
        s.record(end)
        s.synchronize()
        print(s.elapsed_ms(start, end))
    """
    procs = [stack.spawn(code, GO_FILE=str(go)) for _ in range(3)]
    _wait_ready(procs)
    go.touch()
    elapsed = [float(o) for o in _finish(procs)]
    ks = stack.records(layout.KIND_KERNEL)
    assert len(ks) == 6 and len({r.pid for r in ks}) == 3
    cross = [(a, b) for a, b in execution_log.overlapping(ks) if a.pid != b.pid]
    assert cross, "kernels of different processes overlap in time"
    # Processor sharing: an overlapped kernel takes longer than alone, and the
    # processes' event timings include the slowdown.
    slowed = [r for r in ks if r.duration_ns > 1.3 * r.solo_ns]
    assert len(slowed) >= 4, [r.duration_ns / r.solo_ns for r in ks]
    assert max(elapsed) > 1.5 * 120, elapsed
    assert device_file.active_count(stack.name) == 0


def test_killed_process_does_not_wedge_the_device(sim: Sim):
    victim = sim.spawn("""
        s = simcuda.SimCuda()
        s.launch(30 * 1000 * 1000 * 1000, name="never_finishes")
        print("ready", flush=True)
        time.sleep(60)
    """)
    _wait_ready([victim])
    deadline = time.monotonic() + 10
    while device_file.active_count(sim.name) < 1:  # the kernel is running
        assert time.monotonic() < deadline
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert device_file.active_count(sim.name) == 0, "a dead process's kernels do not count"
    sim.run("""
        s = simcuda.SimCuda()
        for _ in range(3):
            s.launch(40 * 1000 * 1000, name="after_kill")
        s.synchronize()
    """)
    after = [r for r in sim.records(layout.KIND_KERNEL) if r.name == "after_kill"]
    # Alone on the device again: far from the 2x a counted dead kernel would cause.
    assert min(r.duration_ns / r.solo_ns for r in after) < 1.6, [r.duration_ns for r in after]
    state = device_file.read_device(sim.name)
    assert victim.pid not in {s.pid for s in state.slots}, "the dead process's slot was reaped"
    assert all(r.name != "never_finishes" for r in sim.records())


# ---------------------------------------------------------------------------
# Busy time, heat and the SM clock (what the runtime's telemetry reads)
# ---------------------------------------------------------------------------

# Two streams of 10 ms kernels, until the device's SM clock (as a reader
# projects it: sim/heat.py) is below its top clock or `seconds` have passed;
# then a kernel timed alone, and the sensors after a moment idle.
LOAD = """
import json
from krex_runtime.sim import heat
def sensors():
    d = device_file.read_device()
    return d, heat.sensors(d.loads[0], d.heat)
s = simcuda.SimCuda()
streams = [s.stream(), s.stream()]
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline and sensors()[1].sm_clock_mhz >= layout.TOP_SM_CLOCK_MHZ:
    for st in streams:
        for _ in range(10):
            s.launch(10 * 1000 * 1000, stream=st)
    s.synchronize()
d, hot = sensors()
stored = d.loads[0].sm_clock_mhz  # the clock the driver runs kernels at since its last step
time.sleep(0.5)
_, later = sensors()
print(json.dumps({"heat": d.heat, "busy_ns": [l.busy_ns for l in d.loads], "temp": hot.temp_c,
                  "clock": hot.sm_clock_mhz, "stored": stored, "idle_temp": later.temp_c}))
"""


def _load(sim: Sim, seconds: float, **env: str) -> dict:
    import json

    proc = subprocess.run([sys.executable, "-c", PREAMBLE + LOAD, str(seconds)], env=sim.with_env(**env),
                          capture_output=True, text=True, timeout=seconds + 60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_busy_time_and_temperature_follow_the_work_and_the_clock_holds_without_the_heat_model(sim: Sim):
    out = _load(sim, 2.0, KREX_SIM_GPUS="2")
    assert out["heat"] is False
    assert out["busy_ns"][0] > 0 and out["busy_ns"][1] == 0  # only the device that ran work was busy
    assert out["temp"] > layout.AMBIENT_C and out["idle_temp"] < out["temp"]  # warmed by the work, cooling idle
    assert out["clock"] == out["stored"] == layout.TOP_SM_CLOCK_MHZ


def test_with_the_heat_model_a_device_kept_busy_runs_below_its_top_clock(sim: Sim):
    """KREX_SIM_HEAT=1: sustained load heats the device past its boost knee,
    and its kernels run at the lower clock (the driver's own stored clock,
    not only what a reader projects)."""
    out = _load(sim, 60.0, KREX_SIM_HEAT="1")
    assert out["heat"] is True
    assert out["temp"] > layout.BOOST_KNEE_C, out
    assert out["clock"] < layout.TOP_SM_CLOCK_MHZ and out["stored"] < layout.TOP_SM_CLOCK_MHZ, out
    # A process without the variable attaching later leaves the model on.
    later = sim.run("""
        s = simcuda.SimCuda()
        s.launch(1000 * 1000)
        s.synchronize()
        print(device_file.read_device().heat)
    """)
    assert later.strip() == "True"


# ---------------------------------------------------------------------------
# Checkpoint lock
# ---------------------------------------------------------------------------

TARGET = """
s = simcuda.SimCuda()
me = os.getpid()
# Queued work long enough to still be running when the locker (a new Python
# process) gets to lock, however loaded the machine.
for _ in range(3):
    s.launch(1000 * 1000 * 1000, name="before_lock")
print("ready", flush=True)
# Wait (without driver calls) until we are locked, then try to launch: the
# launch must block until the unlock.
while not any(p.pid == me and p.locked for p in device_file.read_device().slots):
    time.sleep(0.002)
s.launch(1 * 1000 * 1000, name="after_lock")
s.synchronize()
print("done", flush=True)
"""


def test_checkpoint_lock_drains_and_blocks_until_unlock(stack: Sim):
    target = stack.spawn(TARGET)
    _wait_ready([target])
    out = stack.run(f"""
        pid = {target.pid}
        d = driver.Driver()
        assert driver.checkpoint_state(pid, d) == layout.CU_PROCESS_STATE_RUNNING
        t0 = time.monotonic_ns()
        driver.checkpoint_lock(pid, 0, d)
        t1 = time.monotonic_ns()
        assert driver.checkpoint_state(pid, d) == layout.CU_PROCESS_STATE_LOCKED
        try:
            driver.checkpoint_lock(pid, 0, d)
            raise AssertionError("locked twice")
        except driver.CudaError as e:
            assert e.code == layout.CUDA_ERROR_ILLEGAL_STATE
        time.sleep(0.3)
        driver.checkpoint_unlock(pid, d)
        assert driver.checkpoint_state(pid, d) == layout.CU_PROCESS_STATE_RUNNING
        print((t1 - t0) / 1e6)
    """)
    _finish([target])
    lock = stack.records(layout.KIND_LOCK)
    unlock = stack.records(layout.KIND_UNLOCK)
    assert len(lock) == 1 and len(unlock) == 1 and lock[0].target_pid == target.pid
    mine = [r for r in stack.records(layout.KIND_KERNEL) if r.pid == target.pid]
    before = [r for r in mine if r.name == "before_lock"]
    after = [r for r in mine if r.name == "after_lock"]
    assert len(before) == 3 and len(after) == 1
    # Lock returned only after the queued work finished ...
    assert max(r.end_ns for r in before) <= lock[0].end_ns
    # ... nothing of the target ran while locked, and the blocked launch ran after.
    assert not [r for r in mine if lock[0].end_ns < r.start_ns < unlock[0].start_ns]
    assert after[0].start_ns >= unlock[0].start_ns
    # The lock began while that work was still queued, and returned after it (above).
    assert lock[0].start_ns < max(r.end_ns for r in before), "the lock waited for queued work"


def test_checkpoint_lock_timeout_and_refusals(sim: Sim):
    target = sim.spawn("""
        s = simcuda.SimCuda()
        s.launch(3 * 1000 * 1000 * 1000, name="long")
        print("ready", flush=True)
        s.synchronize()
    """)
    _wait_ready([target])
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        sim.run(f"""
            d = driver.Driver()
            try:
                driver.checkpoint_lock({target.pid}, 100, d)
                raise AssertionError("lock should time out")
            except driver.CudaError as e:
                assert e.code == layout.CUDA_ERROR_TIMEOUT, e
            assert driver.checkpoint_state({target.pid}, d) == layout.CU_PROCESS_STATE_RUNNING
            for call in (lambda: driver.checkpoint_lock({bystander.pid}, 0, d),
                         lambda: driver.checkpoint_state({bystander.pid}, d),
                         lambda: driver.checkpoint_unlock({target.pid}, d)):
                try:
                    call()
                    raise AssertionError("should be refused")
                except driver.CudaError as e:
                    assert e.code in (layout.CUDA_ERROR_NOT_INITIALIZED, layout.CUDA_ERROR_ILLEGAL_STATE), e
        """)
    finally:
        bystander.kill()
        bystander.wait()
        target.kill()
        target.wait()
    assert len(sim.records(layout.KIND_LOCK_TIMEOUT)) == 1
    assert not sim.records(layout.KIND_LOCK)


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------

def test_get_proc_address_returns_working_simulator_functions(sim: Sim):
    sim.run("""
        s = simcuda.SimCuda()
        lib = s.drv.lib
        def addr(name):
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        LEGACY, PT = layout.CU_GET_PROC_ADDRESS_LEGACY_STREAM, layout.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        expect = [
            ("cuMemAlloc", 12000, 0, "cuMemAlloc_v2"), ("cuMemAlloc", 3000, 0, "cuMemAlloc"),
            ("cuCtxCreate", 13000, 0, "cuCtxCreate_v4"), ("cuCtxCreate", 11040, 0, "cuCtxCreate_v3"),
            ("cuCtxSynchronize", 12000, 0, "cuCtxSynchronize"),
            ("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"),
            ("cuCtxSynchronize", 13000, PT, "cuCtxSynchronize_v2"),
            ("cuLaunchKernel", 12000, LEGACY, "cuLaunchKernel"), ("cuLaunchKernel", 12000, PT, "cuLaunchKernel_ptsz"),
            ("cuMemcpyHtoD", 12000, PT, "cuMemcpyHtoD_v2_ptds"), ("cuMemcpyHtoD", 12000, 0, "cuMemcpyHtoD_v2"),
            ("cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2"),
            ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
            ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
            ("cuCheckpointProcessLock", 12080, 0, "cuCheckpointProcessLock"),
            ("cuStreamBeginCapture", 12000, 0, "cuStreamBeginCapture_v2"),
            ("cuStreamBeginCapture", 12000, PT, "cuStreamBeginCapture_v2_ptsz"),
            ("cuStreamGetCaptureInfo", 12030, 0, "cuStreamGetCaptureInfo_v3"),
            ("cuStreamGetCaptureInfo", 11030, PT, "cuStreamGetCaptureInfo_v2_ptsz"),
        ]
        for name, version, flags, symbol in expect:
            got = s.proc_address(name, version, flags)
            assert got == addr(symbol), (name, version, flags, symbol)

        p, status = ctypes.c_void_p(), ctypes.c_int()
        gpa = s.drv.fn("cuGetProcAddress_v2")
        assert gpa(b"cuNoSuchThing", ctypes.byref(p), 13000, 0, ctypes.byref(status)) == layout.CUDA_ERROR_NOT_FOUND
        assert status.value == 1 and not p.value          # SYMBOL_NOT_FOUND
        assert gpa(b"cuCheckpointProcessLock", ctypes.byref(p), 12000, 0, ctypes.byref(status)) == layout.CUDA_ERROR_NOT_FOUND
        assert status.value == 2                          # VERSION_NOT_SUFFICIENT

        # the pointers work
        version = ctypes.c_int()
        get_version = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(s.proc_address("cuDriverGetVersion"))
        assert get_version(ctypes.byref(version)) == 0 and version.value == 13000
        launch = ctypes.CFUNCTYPE(ctypes.c_int, *driver.SIGNATURES["cuLaunchKernel"])(s.proc_address("cuLaunchKernel", 12000, PT))
        c = s.counter()
        params, keep = s._params(2 * 1000 * 1000, c)
        assert launch(s.function("via_proc_address"), 1, 1, 1, 1, 1, 1, 0, None, params, None) == 0
        ctx_sync_v2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(s.proc_address("cuCtxSynchronize", 13000))
        assert ctx_sync_v2(s.ctx) == 0 and s.read_u64(c) == 1

        # unsupported and private entry points answer cleanly
        assert lib.cuMemFreeAsync(ctypes.c_uint64(0), None) == layout.CUDA_ERROR_NOT_SUPPORTED
        assert lib.cuGraphLaunch(None, None) == layout.CUDA_ERROR_INVALID_HANDLE  # graphs are simulated
        table = ctypes.c_void_p(1)
        assert lib.cuGetExportTable(ctypes.byref(table), None) == layout.CUDA_ERROR_NOT_SUPPORTED and not table.value
        text = ctypes.c_char_p()
        assert lib.cuGetErrorString(layout.CUDA_ERROR_NOT_SUPPORTED, ctypes.byref(text)) == 0 and b"not supported" in text.value
        assert s.drv.error_name(layout.CUDA_ERROR_TIMEOUT) == "CUDA_ERROR_TIMEOUT"
        assert lib.cuGetErrorName(123456, ctypes.byref(text)) == layout.CUDA_ERROR_INVALID_VALUE
    """)
    assert [r.name for r in sim.records(layout.KIND_KERNEL)] == ["via_proc_address"]


def test_contexts_and_stream_destroy(sim: Sim):
    sim.run("""
        s = simcuda.SimCuda(device=1)
        d = s.drv
        H = driver.HANDLE
        ctx, cur, popped = H(), H(), H()
        d("cuCtxCreate_v4", ctypes.byref(ctx), None, 0, 0)      # created contexts become current
        d("cuCtxGetCurrent", ctypes.byref(cur))
        assert cur.value == ctx.value
        dev = ctypes.c_int()
        d("cuCtxGetDevice", ctypes.byref(dev))
        assert dev.value == 0
        d("cuCtxPushCurrent_v2", s.ctx)
        d("cuCtxGetDevice", ctypes.byref(dev))
        assert dev.value == 1
        st = s.stream()
        c = s.counter()
        for _ in range(3):
            s.launch(20 * 1000 * 1000, stream=st, counter=c, name="orphaned")
        s.destroy_stream(st)                  # returns at once; the work still runs
        d("cuCtxSynchronize_v2", s.ctx)
        assert s.read_u64(c) == 3
        d("cuCtxPopCurrent_v2", ctypes.byref(popped))
        assert popped.value == s.ctx.value
        d("cuCtxDestroy_v2", ctx)
        assert d.raw("cuCtxDestroy_v2", ctx) == 201           # CUDA_ERROR_INVALID_CONTEXT
        d("cuCtxGetCurrent", ctypes.byref(cur))                # destroying popped it
        assert cur.value == s.ctx.value
    """, KREX_SIM_GPUS="2")
    orphaned = [r for r in sim.records(layout.KIND_KERNEL) if r.name == "orphaned"]
    assert len(orphaned) == 3 and {r.device for r in orphaned} == {1}


def test_errors_before_init_and_without_context(sim: Sim):
    sim.run("""
        d = driver.Driver()
        n = ctypes.c_int()
        assert d.raw("cuDeviceGetCount", ctypes.byref(n)) == layout.CUDA_ERROR_NOT_INITIALIZED
        d("cuInit", 0)
        p = driver.CUdeviceptr()
        assert d.raw("cuMemAlloc_v2", ctypes.byref(p), 16) == 201  # CUDA_ERROR_INVALID_CONTEXT
        assert d.raw("cuCtxSynchronize") == 201
        try:
            d("cuDeviceGet", ctypes.byref(n), 5)
            raise AssertionError("no device 5")
        except driver.CudaError as e:
            assert e.name == "CUDA_ERROR_INVALID_DEVICE" and e.call == "cuDeviceGet"
    """)


# ---------------------------------------------------------------------------
# Sanitizers
# ---------------------------------------------------------------------------

def _asan_runtime() -> str:
    cc = os.environ.get("CC", "cc")
    return subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_mixed_workload_under_asan(sim: Sim, sim_asan_dir: Path, tmp_path: Path):
    go = tmp_path / "go"
    env = {
        "LD_LIBRARY_PATH": str(sim_asan_dir),
        "LD_PRELOAD": _asan_runtime(),  # python is not instrumented: the runtime must come first
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    target = sim.spawn("""
        import threading
        s = simcuda.SimCuda()
        assert "build/asan/sim/libcuda.so.1" in open("/proc/self/maps").read()
        def worker(i):
            s.make_current()
            st = s.stream()
            e0, e1 = s.event(), s.event()
            c = s.counter()
            s.record(e0, st)
            for _ in range(5):
                s.launch(2 * 1000 * 1000, stream=st, counter=c)
                s.launch_ex(1 * 1000 * 1000, stream=st, counter=c)
            s.record(e1, st)
            p = s.alloc(4096)
            s.copy_htod(p, bytes(range(256)) * 16, stream=st, asynchronous=True)
            assert s.copy_dtoh(p, 4096) == bytes(range(256)) * 16
            s.stream_synchronize(st)
            assert s.elapsed_ms(e0, e1) > 0 and s.read_u64(c) == 10
            s.destroy_event(e0); s.destroy_event(e1)
            s.free(p); s.free(c)
            s.destroy_stream(st)
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        for _ in range(3):
            s.launch(50 * 1000 * 1000)
        # Stay until the locker has locked and unlocked us (it may start after
        # this work is done, and lock and unlock faster than any poll could see).
        wait_go()
        s.synchronize()
        s.close()
    """, GO_FILE=str(go), **env)
    _wait_ready([target])
    sim.run(f"""
        d = driver.Driver()
        driver.checkpoint_lock({target.pid}, 0, d)
        driver.checkpoint_unlock({target.pid}, d)
    """, **env)
    go.touch()
    out, err = target.communicate(timeout=60)
    assert target.returncode == 0, err
    assert "Sanitizer" not in err and "runtime error" not in err, err
    assert len(sim.records(layout.KIND_KERNEL)) == 4 * 10 + 3
    assert len(sim.records(layout.KIND_LOCK)) == 1
