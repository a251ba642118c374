"""The simulated driver's device memory (docs/simulator.md, "Device memory"):
an arena per device and process, allocations first-fit in it, what a freed
allocation held kept for the next one of the same process, and addresses
outside mapped device memory refused (copies, memsets) or faulting the
context (kernels), never the process.

Forwarded mode's attacks on a context server (tests/hostile/test_forward_attacks.py)
rest on this being what a GPU does."""

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
import ctypes
from krex_runtime.sim import driver, simcuda
s = simcuda.SimCuda()
d = s.drv
def code(name, *args):
    return d.raw(name, *args)
"""


@pytest.fixture
def run(tmp_path: Path, native_built: Path):
    name = f"test-mem-{os.getpid()}-{tmp_path.name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k not in ("LD_PRELOAD",)}
    env.update({"PYTHONPATH": str(REPO), "LD_LIBRARY_PATH": str(NATIVE / "build" / "sim"), layout.ENV_DEVICE: name})

    def run_code(code: str) -> str:
        done = subprocess.run([sys.executable, "-c", PREAMBLE + textwrap.dedent(code)], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"tenant failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done.stdout

    yield run_code
    device_file.remove_device(name)


def test_a_later_allocation_of_the_process_starts_with_what_a_freed_one_held(run) -> None:
    out = run("""
        a = s.alloc(4096)
        s.copy_htod(a, b"SECRET" * 600)
        s.free(a)
        b = s.alloc(4096)  # first fit: where a was
        print(b == a, s.copy_dtoh(b, 4096).startswith(b"SECRET"))
    """)
    assert out.split() == ["True", "True"]
    # Another process starts with memory nothing wrote (a driver clears it between processes).
    assert run("print(s.copy_dtoh(s.alloc(4096), 4096) == bytes(4096))").strip() == "True"


def test_addresses_outside_mapped_device_memory_are_refused_never_a_crash(run) -> None:
    out = run("""
        a = s.alloc(256)
        host = ctypes.create_string_buffer(64)
        host_addr = ctypes.addressof(host)
        results = [
            code("cuMemcpyDtoH_v2", host, host_addr, 64),         # a host address as device memory
            code("cuMemcpyDtoH_v2", host, 8, 64),                 # unmapped, near 0
            code("cuMemcpyHtoD_v2", host_addr, host, 64),
            code("cuMemcpyDtoD_v2", a, host_addr, 64),
            code("cuMemsetD8_v2", host_addr, 1, 64),
            code("cuMemsetD32_v2", a, 1, 1 << 62),                # its size overflows
            code("cuMemcpyDtoH_v2", host, a + 4096, 64),          # past the allocation, in its mapped page
        ]
        print(" ".join(map(str, results)))
    """)
    assert out.split() == ["1", "1", "1", "1", "1", "1", "0"]  # CUDA_ERROR_INVALID_VALUE; the MMU lets the last through


def test_a_kernel_that_touches_an_address_outside_device_memory_faults_its_context(run) -> None:
    out = run("""
        bad = ctypes.c_uint64(0)
        s.launch(1000, counter=ctypes.addressof(bad))   # host memory as the kernel's counter
        print(code("cuCtxSynchronize"), bad.value, code("cuMemAlloc_v2", ctypes.byref(driver.CUdeviceptr()), 8),
              code("cuMemsetD8_v2", 0, 0, 0))
    """)
    # CUDA_ERROR_ILLEGAL_ADDRESS, sticky: the context is unusable, the process lives.
    sync, counted, _alloc, memset = out.split()
    assert (sync, counted, memset) == ("700", "0", "700")


def test_copies_cost_by_whether_their_host_memory_is_page_locked(tmp_path: Path, native_built: Path) -> None:
    """A copy of page-locked host memory (cuMemAllocHost, cuMemHostRegister) costs
    bytes over the simulated bandwidth, one of pageable memory twice that
    (KREX_SIM_PAGEABLE_COPY_FACTOR); the log names them `memcpy` and `memcpy pageable`.
    Page-locked memory is the driver's to answer for: freeing or unregistering
    what it never gave is refused."""
    from krex_runtime.sim.execution_log import read_execution_log

    log, name = tmp_path / "sim.log", f"test-pinned-{os.getpid()}-{tmp_path.name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k not in ("LD_PRELOAD",)}
    env.update({"PYTHONPATH": str(REPO), "LD_LIBRARY_PATH": str(NATIVE / "build" / "sim"), layout.ENV_DEVICE: name,
                layout.ENV_LOG: str(log)})
    code = PREAMBLE + textwrap.dedent("""
        lib = d.lib
        for fn in ("cuMemAllocHost_v2", "cuMemHostRegister_v2", "cuMemHostUnregister", "cuMemFreeHost",
                   "cuMemcpyHtoD_v2"):
            getattr(lib, fn).restype = ctypes.c_int
        lib.cuMemAllocHost_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        dev = s.alloc(20 * 4096)
        pinned = ctypes.c_void_p()
        registered = ctypes.create_string_buffer(19 * 4096)
        pageable = ctypes.create_string_buffer(20 * 4096)
        results = [
            lib.cuMemAllocHost_v2(ctypes.byref(pinned), 18 * 4096),
            lib.cuMemHostRegister_v2(registered, 19 * 4096, 0),
            lib.cuMemHostRegister_v2(ctypes.addressof(registered) + 4096, 4096, 0),  # already registered: 712
            lib.cuMemcpyHtoD_v2(dev, pinned, 18 * 4096),
            lib.cuMemcpyHtoD_v2(dev, registered, 19 * 4096),
            lib.cuMemcpyHtoD_v2(dev, pageable, 20 * 4096),
            lib.cuMemHostUnregister(registered),
            lib.cuMemHostUnregister(registered),                      # not registered (any more): 713
            lib.cuMemFreeHost(pageable),                              # not the driver's: 1
            lib.cuMemFreeHost(pinned),
        ]
        print(" ".join(map(str, results)))
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["0", "0", "712", "0", "0", "0", "0", "713", "1", "0"]
        copies = {r.bytes: r for r in read_execution_log(log) if r.name.startswith("memcpy")}
        pinned, registered, pageable = (copies[pages * 4096] for pages in (18, 19, 20))
        assert pinned.name == registered.name == "memcpy" and pageable.name == "memcpy pageable"
        assert pinned.solo_ns * 19 == registered.solo_ns * 18  # the same bandwidth
        assert pageable.solo_ns == 2 * registered.solo_ns * 20 // 19
    finally:
        device_file.remove_device(name)
