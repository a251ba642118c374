"""Stream capture on the simulated driver (docs/simulator.md, "Graphs and
stream capture"): work queued on a capturing stream becomes the nodes of a
graph instead of running; an instantiated graph replays them in order on
the launch's stream, with the effects of the same work launched directly;
the misuses a single-process program makes get the driver's errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from krex_runtime.sim import device_file, layout

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"

PREAMBLE = """
import ctypes as c, threading
from krex_runtime.sim import driver, simcuda
s = simcuda.SimCuda()
d = s.drv
lib = d.lib
H = c.c_void_p
SIG = {
    "cuStreamBeginCapture_v2": (H, c.c_int),
    "cuStreamEndCapture": (H, c.POINTER(H)),
    "cuStreamIsCapturing": (H, c.POINTER(c.c_int)),
    "cuStreamGetCaptureInfo_v3": (H, c.POINTER(c.c_int), c.POINTER(c.c_uint64), c.POINTER(H), c.POINTER(c.c_void_p),
                                  c.POINTER(c.c_void_p), c.POINTER(c.c_size_t)),
    "cuGraphInstantiateWithFlags": (c.POINTER(H), H, c.c_ulonglong),
    "cuGraphLaunch": (H, H),
    "cuGraphExecDestroy": (H,),
    "cuGraphDestroy": (H,),
    "cuGraphGetNodes": (H, c.POINTER(H), c.POINTER(c.c_size_t)),
    "cuMemcpyDtoDAsync_v2": (c.c_uint64, c.c_uint64, c.c_size_t, H),
    "cuLaunchHostFunc": (H, c.c_void_p, c.c_void_p),
    "cuEventRecord": (H, H),
}
def rc(name, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = c.c_int, SIG[name]
    r = f(*args)
    return "CUDA_SUCCESS" if r == 0 else d.error_name(r)
def ok(name, *args):
    got = rc(name, *args)
    assert got == "CUDA_SUCCESS", (name, got)
GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2
def status(stream):
    st = c.c_int(-1)
    ok("cuStreamIsCapturing", stream, c.byref(st))
    return ["none", "active", "invalidated"][st.value]
def end(stream):
    g = H(1)
    return rc("cuStreamEndCapture", stream, c.byref(g)), g
"""


@pytest.fixture
def run(tmp_path: Path, native_built: Path):
    name = f"test-capture-{os.getpid()}-{tmp_path.name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k not in ("LD_PRELOAD",)}
    env.update({"PYTHONPATH": str(REPO), "LD_LIBRARY_PATH": str(NATIVE / "build" / "sim"), layout.ENV_DEVICE: name})

    def run_code(code: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", PREAMBLE + textwrap.dedent(code)], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"tenant failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done.stdout.split()

    yield run_code
    device_file.remove_device(name)


def test_captured_work_runs_only_when_the_graph_is_launched_in_order(run) -> None:
    out = run("""
        st = s.stream()
        counter = s.counter()
        src, dst = s.alloc(4096), s.alloc(4096)
        s.copy_htod(src, bytes(range(256)) * 16)
        s.memset_d8(dst, 0, 4096)
        ok("cuStreamBeginCapture_v2", st, GLOBAL)
        print(status(st))
        s.launch(1000, stream=st, counter=counter)
        ok("cuMemcpyDtoDAsync_v2", dst, src, 4096, st)
        s.memset_d32(dst + 4092, 0xA5A5A5A5, 1, stream=st, asynchronous=True)
        s.launch(1000, stream=st, counter=counter)
        got, g = end(st)
        print(got, status(st), s.read_u64(counter), s.copy_dtoh(dst, 4) == bytes(4))
        n = c.c_size_t(0)
        ok("cuGraphGetNodes", g, None, c.byref(n))
        e = H()
        ok("cuGraphInstantiateWithFlags", c.byref(e), g, 0)
        for _ in range(3):
            ok("cuGraphLaunch", e, st)
        s.stream_synchronize(st)
        back = s.copy_dtoh(dst, 4096)
        print(n.value, s.read_u64(counter), back[:4092] == (bytes(range(256)) * 16)[:4092], back[4092:].hex())
        ok("cuGraphExecDestroy", e)
        ok("cuGraphDestroy", g)
    """)
    assert out == ["active", "CUDA_SUCCESS", "none", "0", "True", "4", "6", "True", "a5a5a5a5"]


def test_a_captured_kernel_keeps_its_arguments_and_faults_as_a_launch_would(run) -> None:
    out = run("""
        st = s.stream()
        ok("cuStreamBeginCapture_v2", st, RELAXED)
        s.launch(1000, stream=st, counter=0x10)  # an address no allocation holds
        got, g = end(st)
        e = H()
        ok("cuGraphInstantiateWithFlags", c.byref(e), g, 0)
        print(got, rc("cuGraphLaunch", e, st), d.error_name(d.raw("cuStreamSynchronize", st)))
    """)
    assert out == ["CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_ERROR_ILLEGAL_ADDRESS"]


def test_capture_info_names_the_graph_and_the_last_node(run) -> None:
    out = run("""
        st = s.stream()
        ok("cuStreamBeginCapture_v2", st, THREAD_LOCAL)
        info = lambda: [c.c_int(-1), c.c_uint64(0), H(), c.c_void_p(), c.c_size_t(9)]
        a = info()
        ok("cuStreamGetCaptureInfo_v3", st, c.byref(a[0]), c.byref(a[1]), c.byref(a[2]), c.byref(a[3]), None,
           c.byref(a[4]))
        s.launch(1000, stream=st)
        b = info()
        ok("cuStreamGetCaptureInfo_v3", st, c.byref(b[0]), c.byref(b[1]), c.byref(b[2]), c.byref(b[3]), None,
           c.byref(b[4]))
        got, g = end(st)
        print(a[0].value, a[1].value > 0, a[1].value == b[1].value, a[4].value, b[4].value, b[2].value == g.value)
        nodes = (H * 1)()
        n = c.c_size_t(1)
        ok("cuGraphGetNodes", g, nodes, c.byref(n))
        print(c.cast(b[3], c.POINTER(H))[0] == nodes[0])
        ok("cuStreamBeginCapture_v2", st, GLOBAL)
        again = info()
        ok("cuStreamGetCaptureInfo_v3", st, c.byref(again[0]), c.byref(again[1]), None, None, None, None)
        print(again[1].value > b[1].value)
    """)
    assert out == ["1", "True", "True", "0", "1", "True", "True", "True"]


def test_misuse_gets_the_drivers_errors(run) -> None:
    out = run("""
        st = s.stream()
        print(end(st)[0])                                      # never begun
        print(rc("cuStreamBeginCapture_v2", None, GLOBAL))     # the legacy default stream
        print(rc("cuStreamBeginCapture_v2", st, 7))            # no such mode
        ok("cuStreamBeginCapture_v2", st, GLOBAL)
        print(rc("cuStreamBeginCapture_v2", st, GLOBAL))       # already capturing
        print(status(st))
        got, g = end(st)
        print(got, g.value is None)                            # an empty graph is a graph
        e = H()
        ok("cuGraphInstantiateWithFlags", c.byref(e), g, 0)
        ok("cuStreamBeginCapture_v2", st, GLOBAL)
        print(rc("cuGraphLaunch", e, st), status(st))          # a graph launched into its own capture
        try:
            s.launch(1000, stream=st)
        except driver.CudaError as err:
            print(d.error_name(err.code))                      # later work: the capture is over
        got, g2 = end(st)
        print(got, g2.value is None, status(st))
        ok("cuStreamBeginCapture_v2", st, GLOBAL)
        print(d.error_name(d.raw("cuStreamSynchronize", st)), status(st))
        print(end(st)[0])
        ok("cuStreamBeginCapture_v2", st, GLOBAL)
        ev = s.event()
        print(rc("cuEventRecord", ev, st), end(st)[0])
        print(rc("cuGraphLaunch", None, st), rc("cuGraphExecDestroy", None), rc("cuGraphDestroy", None))
        ok("cuGraphExecDestroy", e)
        ok("cuGraphDestroy", g)
    """)
    assert out == [
        "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        "CUDA_ERROR_INVALID_VALUE",
        "CUDA_ERROR_ILLEGAL_STATE",
        "active",
        "CUDA_SUCCESS", "False",
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "invalidated", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "True", "none",
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "invalidated",
        "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_INVALID_HANDLE",
    ]


def test_a_global_capture_ends_on_the_thread_that_began_it_a_relaxed_one_anywhere(run) -> None:
    out = run("""
        results = []
        for mode in (GLOBAL, THREAD_LOCAL, RELAXED):
            st = s.stream()
            ok("cuStreamBeginCapture_v2", st, mode)
            def other():
                s.make_current()
                results.append(end(st)[0])
            t = threading.Thread(target=other)
            t.start()
            t.join()
            if results[-1] != "CUDA_SUCCESS":
                results.append(end(st)[0])
        print(*results)
    """)
    assert out == ["CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "CUDA_SUCCESS",
                   "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "CUDA_SUCCESS", "CUDA_SUCCESS"]


def test_a_stream_destroyed_while_capturing_takes_its_capture(run) -> None:
    out = run("""
        st = s.stream()
        ok("cuStreamBeginCapture_v2", st, GLOBAL)
        s.launch(1000, stream=st)
        s.destroy_stream(st)
        print(rc("cuStreamIsCapturing", st, c.byref(c.c_int())))
    """)
    assert out == ["CUDA_ERROR_INVALID_HANDLE"]
