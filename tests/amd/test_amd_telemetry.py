"""Telemetry of real AMD GPUs through AMD SMI (telemetry/amd_smi.py), proven
against a double of the `amdsmi` package (tests/fakes/amdsmi, following
AMD's documented API) since no AMD GPU is reachable here: the sampler's
values and units, the clock witness judging the GFX clock against its top
clock, power and thermal violations as throttle flags, the process witness,
a mixed node asking each GPU of its own vendor; and a real runtime serving
an "AMD GPU" the double reports, flagging a region granted below the top
clock, not one on it, and showing the clock in its status and console rows.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, REPO, regions_config, snapshot

from krex_console.model import ConsoleModel, gpu_figures
from krex_console.views.gpu_detail import summarize_gpu
from krex_runtime.node.gpus import Gpu
from krex_runtime.telemetry import sources
from krex_runtime.telemetry.amd_smi import AmdSmiProcesses, AmdSmiSampler
from krex_runtime.telemetry.clocks import Clocks
from krex_runtime.telemetry.gpu_metrics import METRICS, UnavailableSampler, sample_all
from krex_runtime.testing.local_runtime import wait_until
from krex_runtime.wire.state import apply as node_state

FAKES = REPO / "tests" / "fakes"
UUID = "GPU-5fc4a1b2-0000-1000-8000-00000000a0a1"
TOP, LOW = 2100, 1500  # MHz; 1500 is 29% under the top clock, past the 10% tolerance
MI300X: dict[str, Any] = {
    "uuid": UUID, "market_name": "AMD Instinct MI300X", "vram_mb": 196592, "numa_node": 0,
    "gfx_clk": TOP, "gfx_max_clk": TOP, "mem_clk": 1300, "deep_sleep": 0, "power_w": 650, "hotspot_c": 71,
    "edge_c": None, "gfx_activity": 97, "vram_used_mb": 2048,
    "violations": {"active_ppt_pwr": False, "active_socket_thrm": False, "active_prochot_thrm": False,
                   "active_vr_thrm": False, "active_hbm_thrm": False},
    "processes": [{"pid": 4242, "vram": 1 << 30}],
}  # fmt: skip


def write_gpus(path: Path, *gpus: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": list(gpus)}))
    tmp.replace(path)  # whole, so the runtime never reads half a file


def amd_gpu(index: int = 0, uuid: str = UUID) -> Gpu:
    return Gpu(index=index, uuid=uuid, name="AMD Instinct MI300X", memory_total=196592 << 20, cpus=(0,),
               simulated=False, vendor="amd")


@pytest.fixture
def fake_amdsmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The double importable as `amdsmi` in this process, describing the GPUs in the file returned."""
    state = tmp_path / "amdsmi.json"
    write_gpus(state, MI300X)
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("KREX_FAKE_AMDSMI", str(state))
    monkeypatch.delenv("KREX_TELEMETRY_FAULTS", raising=False)
    sys.modules.pop("amdsmi", None)
    yield state
    sys.modules.pop("amdsmi", None)


def test_the_sampler_reads_amd_smi_in_the_records_nvml_gives(fake_amdsmi: Path) -> None:
    sampler = AmdSmiSampler([amd_gpu()])
    try:
        sample = sampler.sample(0)
        assert set(sample) == set(METRICS) | {"simulated"}
        assert sample == {
            "util_pct": 97.0, "mem_used": 2048 << 20, "mem_total": 196592 << 20, "sm_clock_mhz": float(TOP),
            "mem_clock_mhz": 1300.0, "temp_c": 71.0, "power_w": 650.0, "throttle": [], "processes": 1,
            "simulated": False,
        }  # fmt: skip
        assert sampler.clock_sample(0) == {"sm_clock_mhz": float(TOP), "throttle": [], "idle": False,
                                           "power_w": 650.0, "temp_c": 71.0}
        assert sampler.top_clock(0) == TOP

        # A GPU without violation status (before ROCm 6.3, or not an MI300) says
        # only whether it is throttled; one that says neither is n/a; values
        # the GPU does not give ("N/A") are None, the edge sensor stands in for
        # a missing hotspot one.
        write_gpus(fake_amdsmi, MI300X | {"violations": None, "throttle_status": True, "hotspot_c": None,
                                          "edge_c": 44, "power_w": None, "gfx_activity": None})
        sample = sampler.sample(0)
        assert sample["throttle"] == ["smu_throttle"] and sample["temp_c"] == 44.0
        assert sample["power_w"] is None and sample["util_pct"] is None
        write_gpus(fake_amdsmi, MI300X | {"violations": None})
        assert sampler.clock_sample(0)["throttle"] is None
    finally:
        sampler.close()


def test_the_clock_witness_judges_an_amd_gpu_against_its_top_gfx_clock(fake_amdsmi: Path) -> None:
    clocks = Clocks(AmdSmiSampler([amd_gpu()]), tolerance=0.1)
    try:
        on = clocks.now(0)
        assert on["on_clock"] is True and on["flags"] == [] and on["top_clock_mhz"] == TOP

        write_gpus(fake_amdsmi, MI300X | {"gfx_clk": LOW, "violations": MI300X["violations"] | {"active_ppt_pwr": True}})
        off = clocks.now(0)
        assert off["on_clock"] is False and off["throttle"] == ["ppt_power"]
        assert off["flags"] == ["throttled:ppt_power", f"clock:{LOW}MHz-below-top-{TOP}MHz"]

        # GFX clock in deep sleep: the GPU is idle, its clock comes back with work.
        write_gpus(fake_amdsmi, MI300X | {"gfx_clk": 130, "deep_sleep": 1})
        idle = clocks.now(0)
        assert idle["on_clock"] is None and idle["flags"] == []
    finally:
        clocks.sampler.close()


def test_failures_are_n_a_never_errors(fake_amdsmi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A GPU whose UUID AMD SMI does not list: every metric n/a, no clock to judge against.
    stranger = AmdSmiSampler([amd_gpu(uuid="GPU-not-listed")])
    try:
        assert sample_all(stranger, [amd_gpu(uuid="GPU-not-listed")])["0"]["sm_clock_mhz"] is None
        assert Clocks(stranger, 0.1).now(0)["on_clock"] is None
    finally:
        stranger.close()
    # KREX_TELEMETRY_FAULTS fails the named reads on AMD GPUs as on NVIDIA ones.
    monkeypatch.setenv("KREX_TELEMETRY_FAULTS", "sm_clock_mhz,temp_c")
    sampler = AmdSmiSampler([amd_gpu()])
    try:
        sample = sampler.sample(0)
        assert sample["sm_clock_mhz"] is None and sample["temp_c"] is None and sample["power_w"] == 650.0
    finally:
        sampler.close()
    # No driver: AMD SMI cannot be opened, so the node's AMD GPUs are n/a and it goes on.
    monkeypatch.delenv("KREX_FAKE_AMDSMI")
    assert isinstance(sources.open_sampler([amd_gpu()], "unused"), UnavailableSampler)


def test_the_process_witness_and_the_sampler_share_one_opening(fake_amdsmi: Path) -> None:
    """libamd_smi's init is process-wide: the first shut-down ends every
    handle, so the witness must outlive the sampler's close."""
    sampler = AmdSmiSampler([amd_gpu()])
    processes = AmdSmiProcesses([amd_gpu()])
    sampler.close()
    assert processes.running(0) is not None and set(processes.running(0) or {}) == {4242}
    assert processes.memory(0) == {4242: 1 << 30}
    processes.smi.close()
    assert processes.running(0) is None  # shut down: n/a, not an exception


def test_a_mixed_node_asks_each_gpu_of_its_own_vendor(fake_amdsmi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML cannot open here: the NVIDIA GPU is n/a, the AMD one still reports."""
    import pynvml

    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    nvidia = Gpu(index=0, uuid="GPU-nv", name="NVIDIA H200", memory_total=1, cpus=(0,), simulated=False)
    gpus = [nvidia, amd_gpu(index=1)]
    sampler = sources.open_sampler(gpus, "unused")
    try:
        metrics = sample_all(sampler, gpus)
        assert metrics["0"]["sm_clock_mhz"] is None and metrics["1"]["sm_clock_mhz"] == TOP
        assert sampler.top_clock(0) is None and sampler.top_clock(1) == TOP
        witness = sources.open_processes(gpus, "unused")
        assert witness.running(0) is None and set(witness.running(1)) == {4242}
    finally:
        sampler.close()


# A tenant that holds one region and prints what region() said of it.
TENANT = """
import json
from krex_runtime.client import region
with region() as r:
    entry = list(r.flags)
print(json.dumps({"entry": entry, "off_clock": r.off_clock}))
"""


def test_a_runtime_on_an_amd_gpu_flags_a_region_granted_below_its_top_clock(make_runtime: Any, tmp_path: Path) -> None:
    state = tmp_path / "amdsmi.json"
    write_gpus(state, MI300X)
    path = os.pathsep.join(filter(None, [str(FAKES), str(REPO), os.environ.get("PYTHONPATH")]))
    rt = make_runtime(
        policy="krex", sim=0, gpus_extra='vendor = "amd"',
        runtime_env={"PYTHONPATH": path, "KREX_FAKE_AMDSMI": str(state)},
        extra_config=regions_config(settle_max_s=0.1, settle_poll_s=0.01),
    )  # fmt: skip

    def take_region() -> dict[str, Any]:
        done = rt.krex("run", "--", PY, "-c", TENANT)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert take_region() == {"entry": [], "off_clock": False}  # on its top clock: nothing to say
    write_gpus(state, MI300X | {"gfx_clk": LOW})
    assert take_region() == {"entry": [f"clock:{LOW}MHz-below-top-{TOP}MHz"], "off_clock": True}
    write_gpus(state, MI300X | {"violations": MI300X["violations"] | {"active_socket_thrm": True}})
    assert take_region()["entry"] == ["throttled:socket_thermal"]
    write_gpus(state, MI300X)

    # The status and the console show the AMD GPU's own figures.
    gpu = snapshot(rt)["gpus"][0]
    assert gpu["vendor"] == "amd" and not gpu["simulated"] and gpu["uuid"] == UUID
    status = rt.krex("status")
    assert status.returncode == 0 and "AMD Instinct MI300X" in status.stdout, status.stderr

    def sampled() -> dict[str, Any] | None:
        telemetry = snapshot(rt)["gpus"][0].get("telemetry") or {}
        return telemetry if telemetry.get("sm_clock_mhz") == TOP and telemetry.get("throttle") == [] else None

    telemetry = wait_until(sampled, what="a sample of the AMD GPU on its top clock")
    assert telemetry["simulated"] is False
    assert telemetry["temp_c"] == 71 and telemetry["power_w"] == 650 and telemetry["util_pct"] == 97
    console_state = node_state.from_snapshot(snapshot(rt))
    figures = gpu_figures(console_state, console_state.gpus[0], console_state.time)
    assert figures["gpu"] == "0 AMD Instinct MI300X (AMD)" and figures["sm_clock"] == f"{TOP}MHz"
    assert figures["temp"] == "71C" and figures["util"] == "97%"
    panel = summarize_gpu(ConsoleModel(state=console_state, now=console_state.time), console_state.gpus[0])
    assert "AMD" in panel and "650W" in panel
