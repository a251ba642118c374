"""AMD GPUs end to end on the simulated HIP runtime: a real runtime under
policy krex serving simulated AMD GPUs (and, on a mixed node, simulated
NVIDIA ones beside them), real tenants with the HIP interception library
preloaded: Python tenants calling HIP through ctypes (krex_runtime.sim.simhip)
and a C tenant linked with libamdhip64: what only AMD GPUs or a mixed node
have (the tenant's environment, regions on both vendors under one runtime,
C HIP tenants, the freeze after HIP's initialisation).

The rest runs on both vendors by a `vendor` parameter: the region invariant
suite and the faults in tests/regions/test_regions.py and
tests/regions/test_fault_matrix.py, the region channel's abuse in
tests/regions/test_region_channel.py, unprotected timings in
tests/integrity/test_unprotected_timings.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from typing import Any

from region_checks import (
    check_exclusive,
    check_held_alone,
    check_no_submissions_while_held,
    check_nothing_left,
    check_regions_ran,
    regions_of,
)
from runtime_helpers import (
    PY,
    RECOVERY_BOUND_S,
    REPO,
    TENANTS,
    busy,
    cgroup_root,
    command_pid,
    finish,
    frozen_cgroups,
    gpu_state,
    load_test_file,
    regions_config,
    submit,
    trace_events,
    wait_ready,
)

from krex_runtime.sim.device_file import active_count
from krex_runtime.testing.local_runtime import wait_until

HIP_TENANT = REPO / "native" / "build" / "tests" / "hip_tenant"


def amd_runtime(make_runtime: Any, nvidia: int = 0, amd: int = 1, slots: int = 16, **settings: object) -> Any:
    return make_runtime(policy="krex", sim=nvidia, sim_amd=amd, slots=slots, extra_config=regions_config(**settings))


def test_an_amd_tenant_gets_hip_and_its_gpu_alone(make_runtime: Any) -> None:
    rt = amd_runtime(make_runtime, nvidia=1, amd=1)
    script = ("import os; e = os.environ; print(e['KREX_GPU_VENDOR'], e.get('HIP_VISIBLE_DEVICES'), "
              "e.get('CUDA_VISIBLE_DEVICES'), os.path.basename(e['LD_PRELOAD'].split()[0]))")
    on_amd = rt.krex("run", "--gpu", "1", "--", PY, "-c", script)
    on_nvidia = rt.krex("run", "--gpu", "0", "--", PY, "-c", script)
    assert on_amd.returncode == 0 and on_nvidia.returncode == 0, on_amd.stderr + on_nvidia.stderr
    assert on_amd.stdout.split() == ["amd", "1", "None", "libkrex_hip.so"]
    assert on_nvidia.stdout.split() == ["nvidia", "None", "0", "libkrex.so"]
    gpus = rt.krex("status", "--json")
    assert gpus.returncode == 0, gpus.stderr
    assert [g.get("vendor") for g in json.loads(gpus.stdout)["gpus"]] == ["nvidia", "amd"]


def test_mixed_node_serves_regions_on_both_vendors_independently(make_runtime: Any) -> None:
    """The invariant suite on one NVIDIA and one AMD simulated GPU under one
    runtime: 8 Python tenants per GPU (HIP through ctypes on the AMD one),
    each with 3 regions and work left queued before each."""
    rt = amd_runtime(make_runtime, nvidia=1, amd=1)
    ids = [
        submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "3", "--kernel-us", "300", "--repeats", "3",
               "--pause-ms", "30", "--noise", str(i % 3), "--noise-us", "400", gpu=i % 2)
        for i in range(16)
    ]
    check_regions_ran(rt, ids, 3)
    _, held, records = check_held_alone(rt)
    assert len(held) == 48 and records > 48 * 3
    assert sorted({h.gpu for h in held}) == [0, 1]


def test_c_hip_tenants_measure_in_regions(make_runtime: Any) -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/tests/hip_tenant"], check=True)
    rt = amd_runtime(make_runtime)
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    done = rt.krex("run", "--", str(HIP_TENANT), "regions", "3", "500")
    assert done.returncode == 0, done.stderr
    assert [line.split()[:2] for line in done.stdout.splitlines()] == [["region", str(n)] for n in range(3)]
    finish(rt, *others)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_no_submissions_while_held(held)
    assert check_exclusive(events, held, rt.root / "sim.log") >= 9
    assert {e["verdict"] for e in events if e["type"] == "region_released"} == {"verified"}


def test_sigkill_of_a_c_hip_holder_with_its_kernel_in_flight(make_runtime: Any) -> None:
    """A C tenant linked with libamdhip64, killed in its region while it waits
    on its kernel (10 minutes): the region goes with it within the bound,
    the others are thawed, and the next C tenant's regions are verified."""
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/tests/hip_tenant"], check=True)
    rt = amd_runtime(make_runtime)
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    holder = submit(rt, str(HIP_TENANT), "regions", "1", str(600 * 10**6))
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None, 60, "the region to be granted")
    wait_until(lambda: active_count(rt.device) == 1, 30, "the holder's kernel alone to run")
    root = cgroup_root(rt)
    assert len(frozen_cgroups(root)) == 2
    os.kill(command_pid(rt, holder), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt)["region_holder"] is None, RECOVERY_BOUND_S, "the region to be released")
    assert trace_events(rt, "region_released")[-1]["reason"] == "tenant disconnected"
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(root) == []
    done = rt.krex("run", "--", str(HIP_TENANT), "regions", "2", "500")
    assert done.returncode == 0, done.stderr
    assert [line.split()[:2] for line in done.stdout.splitlines()] == [["region", "0"], ["region", "1"]]
    finish(rt, *others)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_no_submissions_while_held(held)
    verdicts = [e["verdict"] for e in events if e["type"] == "region_released"]
    assert verdicts[1:] == ["verified", "verified"], verdicts


def test_a_tenant_is_frozen_only_after_its_hip_initialisation(make_runtime: Any) -> None:
    """A tenant inside hipInit (3 s here: the simulated runtime's context
    creation) when a region is entered, past the entry's wait for host-side
    calls (none here), is left running and frozen once out of it (the HIP
    library makes initialisation a context-class call)."""
    rt = amd_runtime(make_runtime, host_side_wait_s=0)
    starting = submit(rt, "env", "KREX_SIM_CTX_CREATE_MS=3000", PY, str(TENANTS / "busy.py"), "2000", "2", "1")
    time.sleep(1.0)  # inside its hipInit by now (start-up of Python is well under that)
    holder = submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200", "--hold-s", "5")
    done = rt.krex("wait", holder)
    assert done.returncode == 0, done.stderr
    released = trace_events(rt, "region_released")[-1]
    assert len(released["late_frozen"]) == 1, released
    check_nothing_left(rt.run_dir)
    finish(rt, starting)


def _runs_on_amd(function: Any) -> bool:
    """A test function with an `amd` among the values it is parametrised with."""
    marks = [m for m in getattr(function, "pytestmark", []) if m.name == "parametrize"]
    return any("amd" in (value if isinstance(value, tuple) else (value,)) for m in marks for value in m.args[1])


# The test files whose tests are parametrised over the vendor (tests/<part>/<file>).
VENDOR_SUITES = ("regions/test_regions.py", "regions/test_fault_matrix.py", "regions/test_region_channel.py",
                 "integrity/test_unprotected_timings.py")



def test_the_docs_name_exactly_the_tests_that_run_on_hip() -> None:
    """docs/native.md's table of what is proven on AMD GPUs names every test
    parametrised onto the simulated AMD GPU, and no test that is not."""
    doc = (REPO / "docs" / "native.md").read_text()
    table = doc[doc.index("### What is proven, and what awaits an AMD GPU"):doc.index("## GPU results")]
    named = set(re.findall(r"`(?:[\w/]+\.py::)?(test_\w+)", table))
    parametrised = {name: function for module in map(load_test_file, VENDOR_SUITES)
                    for name, function in vars(module).items() if name.startswith("test_")}
    on_amd = {name for name, function in parametrised.items() if _runs_on_amd(function)}
    assert on_amd - named == set(), "docs/native.md does not name these tests that run on HIP"
    assert {n for n in named if n in parametrised} - on_amd == set(), "docs/native.md names tests that never run on HIP"
    assert {n for n in named if n not in parametrised} <= set(globals()), "docs/native.md names tests that do not exist"

