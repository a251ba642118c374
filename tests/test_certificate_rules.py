"""The certificate's rules on their own (regions/certificate.py), with the
witnesses a real GPU gives (NVML: no work counts, utilisation samples) faked:
the simulator cannot produce them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from krex_runtime.regions.certificate import Certifier, certify
from krex_runtime.telemetry.gpu_processes import GpuProcess

HOLDER, HOLDER_PID, OTHER_PID, FOREIGN_PID = 1, 100, 200, 300


class Fake:
    def __init__(self) -> None:
        self.calls = {OTHER_PID: 5}
        self.running: dict[int, GpuProcess] | None = {
            HOLDER_PID: GpuProcess(HOLDER_PID, None, True), OTHER_PID: GpuProcess(OTHER_PID, None, True)}
        self.samples: dict[int, tuple[int, int]] | None = {HOLDER_PID: (90, 250), OTHER_PID: (0, 250)}
        self.clock: dict[str, Any] = {"sm_clock_mhz": 1980, "flags": []}

    def others(self, holder: int) -> list[Any]:
        return [SimpleNamespace(pid=p, tenant_id=2, calls_total=c) for p, c in self.calls.items()]

    def utilisation(self, gpu: int, since: int) -> dict[int, tuple[int, int]] | None:
        return self.samples


def certifier(fake: Fake) -> Certifier:
    processes = SimpleNamespace(running=lambda gpu: fake.running, utilisation=fake.utilisation)
    return Certifier(0, fake, processes, {HOLDER_PID: HOLDER, OTHER_PID: 2}.get,  # type: ignore[arg-type]
                     lambda pid: pid != FOREIGN_PID, lambda gpu: fake.clock)


def verdict(fake: Fake, change: Any) -> tuple[str, list[str]]:
    c = certifier(fake)
    w = c.start(HOLDER, HOLDER_PID, fake.clock)
    change(fake)
    return certify(c, w, HOLDER)


def test_a_real_gpu_alone_is_verified_with_every_witness() -> None:
    v, reasons = verdict(Fake(), lambda f: None)
    assert v == "verified" and reasons == [
        "gate: no other tenant's call passed", "processes: no process outside this runtime's tenants",
        "utilisation: samples show only the holder", "clock: 1980 MHz, within tolerance"]


def test_each_witness_can_violate_and_says_why() -> None:
    v, reasons = verdict(Fake(), lambda f: f.calls.update({OTHER_PID: 7}))
    assert v == "violated" and reasons[0] == "gate: tenant 2 (pid 200) made 2 GPU call(s) through it"
    v, reasons = verdict(Fake(), lambda f: f.running.update({FOREIGN_PID: GpuProcess(FOREIGN_PID, None, True)}))
    assert v == "violated" and reasons[0] == "processes: pid 300 uses the GPU and is not a tenant of this runtime"
    v, reasons = verdict(Fake(), lambda f: f.samples.update({OTHER_PID: (40, 312)}))
    assert v == "violated" and reasons[0] == "utilisation: samples show pid 200 at 40% SM, stamped 312 ms after the grant"
    v, reasons = verdict(Fake(), lambda f: f.clock.update({"flags": ["clock:1500MHz-vs-baseline-1980MHz"]}))
    assert v == "violated" and reasons[0] == "clock: clock:1500MHz-vs-baseline-1980MHz"


def test_throttling_alone_is_named_not_a_violation_and_missing_witnesses_say_unknown() -> None:
    v, reasons = verdict(Fake(), lambda f: f.clock.update({"flags": ["throttled:sw_power_cap"]}))
    assert v == "verified" and reasons[3] == "clock: 1980 MHz, within tolerance (flags: throttled:sw_power_cap)"
    fake = Fake()
    fake.samples = None
    assert verdict(fake, lambda f: None)[0] == "verified"  # utilisation n/a: the gate and the process list suffice
    fake = Fake()
    v, reasons = verdict(fake, lambda f: setattr(f, "running", None))
    assert v == "unknown" and "processes: n/a" in reasons
    assert certify(None, None, HOLDER) == ("unknown", ["no witnesses on this node"])


class FakeNvml:
    """NVML's sample reads, for the window arithmetic of NvmlProcesses."""

    NVML_GPU_UTILIZATION_SAMPLES = 1

    class NVMLError(Exception):
        pass

    def __init__(self, stamps_us: list[int], process_samples: list[tuple[int, int, int]]) -> None:
        self.stamps_us = stamps_us
        self.process_samples = process_samples  # (pid, SM %, stamp in wall-clock us)
        self.asked_since: list[int] = []

    def nvmlDeviceGetSamples(self, handle: Any, kind: int, since: int) -> tuple[int, list[Any]]:
        if not self.stamps_us:
            raise self.NVMLError("Not Supported")
        return 0, [SimpleNamespace(timeStamp=t) for t in self.stamps_us]

    def nvmlDeviceGetProcessUtilization(self, handle: Any, since: int) -> list[Any]:
        self.asked_since.append(since)
        return [SimpleNamespace(pid=p, smUtil=u, timeStamp=t) for p, u, t in self.process_samples]


def nvml_processes(nvml: FakeNvml) -> Any:
    from krex_runtime.telemetry import gpu_processes

    p = object.__new__(gpu_processes.NvmlProcesses)
    p.nvml, p.handles = nvml, {0: "h"}
    p.period_us = {0: gpu_processes.sample_period_us(nvml, "h")}
    return p


def test_the_sample_period_is_read_from_the_gpus_samples_else_the_longest_is_assumed() -> None:
    from krex_runtime.telemetry.gpu_processes import LONGEST_PERIOD_US, sample_period_us

    assert sample_period_us(FakeNvml([0, 166_667, 333_333, 500_000, 666_667], []), "h") == 166_667
    assert sample_period_us(FakeNvml([], []), "h") == LONGEST_PERIOD_US  # not supported
    assert sample_period_us(FakeNvml([0, 100_000], []), "h") == LONGEST_PERIOD_US  # too few to tell
    assert sample_period_us(FakeNvml([0, 5_000_000, 10_000_000, 15_000_000], []), "h") == LONGEST_PERIOD_US


def test_only_samples_that_cover_the_region_alone_count_and_say_when_they_were_stamped() -> None:
    import time

    from krex_runtime.telemetry.gpu_processes import MARGIN_US

    now_us = int(time.time() * 1e6)
    period = 166_667
    stamps = [now_us - 5 * period + i * period for i in range(5)]
    # The region was granted 600 ms ago: a sample stamped 100 ms after the grant
    # covers drained work from before it; one stamped 400 ms after covers the region alone.
    grant_us = now_us - 600_000
    nvml = FakeNvml(stamps, [(OTHER_PID, 99, grant_us + 100_000), (OTHER_PID, 30, grant_us + 400_000),
                             (HOLDER_PID, 90, grant_us + 400_000)])
    p = nvml_processes(nvml)
    since_mono_ns = time.monotonic_ns() - 600_000_000
    samples = p.utilisation(0, since_mono_ns)
    assert samples is not None and samples[OTHER_PID][0] == 30 and abs(samples[OTHER_PID][1] - 400) <= 50
    assert abs(nvml.asked_since[-1] - (grant_us + period + MARGIN_US)) < 50_000
    # A region shorter than a period: no sample can speak for it alone.
    assert p.utilisation(0, time.monotonic_ns() - 50_000_000) is None
