"""The certificate's rules on their own (regions/certificate.py), with the
witnesses a real GPU gives (NVML: no work counts) faked:
the simulator cannot produce them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from krex_runtime.regions.certificate import Certificate, Certifier, certify
from krex_runtime.telemetry.gpu_processes import GpuProcess

HOLDER, HOLDER_PID, OTHER_PID, FOREIGN_PID = 1, 100, 200, 300


class Fake:
    def __init__(self) -> None:
        self.calls = {OTHER_PID: 5}
        self.running: dict[int, GpuProcess] | None = {
            HOLDER_PID: GpuProcess(HOLDER_PID, None, True), OTHER_PID: GpuProcess(OTHER_PID, None, True)}
        self.clock: dict[str, Any] = {"sm_clock_mhz": 1980, "flags": []}

    def others(self, holder: int) -> list[Any]:
        return [SimpleNamespace(pid=p, tenant_id=2, calls_total=c) for p, c in self.calls.items()]


def certifier(fake: Fake) -> Certifier:
    processes = SimpleNamespace(running=lambda gpu: fake.running)
    return Certifier(0, fake, processes, {HOLDER_PID: HOLDER, OTHER_PID: 2}.get,  # type: ignore[arg-type]
                     lambda pid: pid != FOREIGN_PID, lambda gpu: fake.clock)


def verdict(fake: Fake, change: Any) -> tuple[str, list[str]]:
    c = certifier(fake)
    w = c.start(HOLDER, HOLDER_PID, fake.clock)
    change(fake)
    cert = certify(c, w, HOLDER)
    return cert.verdict, cert.reasons


def test_a_real_gpu_alone_is_verified_with_every_witness() -> None:
    v, reasons = verdict(Fake(), lambda f: None)
    assert v == "verified" and reasons == [
        "gate: no other tenant's call passed", "processes: no process outside this runtime's tenants",
        "clock: 1980 MHz, within tolerance"]


def test_each_witness_can_violate_and_says_why() -> None:
    v, reasons = verdict(Fake(), lambda f: f.calls.update({OTHER_PID: 7}))
    assert v == "violated" and reasons[0] == "gate: tenant 2 (pid 200) made 2 GPU call(s) through it"
    v, reasons = verdict(Fake(), lambda f: f.running.update({FOREIGN_PID: GpuProcess(FOREIGN_PID, None, True)}))
    assert v == "violated" and reasons[0] == "processes: pid 300 uses the GPU and is not a tenant of this runtime"


def test_a_clock_is_a_note_on_the_measurement_never_a_violation() -> None:
    """A clock below the GPU's top, or a power cap, is named; the region stays verified."""
    v, reasons = verdict(Fake(), lambda f: f.clock.update({"sm_clock_mhz": 1500, "flags": ["clock:1500MHz-below-top-1980MHz"]}))
    assert v == "verified" and reasons[2] == (
        "clock: 1500 MHz at the release (flags on the measurement, not interference: clock:1500MHz-below-top-1980MHz)")
    v, reasons = verdict(Fake(), lambda f: f.clock.update({"flags": ["throttled:sw_power_cap"]}))
    assert v == "verified" and reasons[2] == (
        "clock: 1980 MHz at the release (flags on the measurement, not interference: throttled:sw_power_cap)")


def test_missing_witnesses_say_unknown() -> None:
    fake = Fake()
    fake.clock = {"sm_clock_mhz": None}
    v, reasons = verdict(fake, lambda f: None)
    assert v == "verified" and "clock: n/a" in reasons  # the gate and the process list suffice
    fake = Fake()
    v, reasons = verdict(fake, lambda f: setattr(f, "running", None))
    assert v == "unknown" and "processes: n/a" in reasons
    assert certify(None, None, HOLDER) == Certificate("unknown", ["no witnesses on this node"], [])

