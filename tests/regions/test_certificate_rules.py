"""The certificate's rules on their own (regions/certificate.py), with the
witnesses a real GPU gives (NVML: no work counts) faked:
the simulator cannot produce them."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from krex_runtime.regions.certificate import Certificate, Certifier, certify
from krex_runtime.telemetry.gpu_processes import GpuProcess, alive_only

HOLDER, HOLDER_PID, OTHER_PID, FOREIGN_PID, UNGATED_PID = 1, 100, 200, 300, 400


class Fake:
    def __init__(self) -> None:
        self.calls = {OTHER_PID: 5}
        self.running: dict[int, GpuProcess] | None = {
            HOLDER_PID: GpuProcess(HOLDER_PID, None, True), OTHER_PID: GpuProcess(OTHER_PID, None, True)}
        self.clock: dict[str, Any] = {"sm_clock_mhz": 1980, "flags": []}

    def others(self, holder: int) -> list[Any]:
        return [SimpleNamespace(pid=p, tenant_id=2, calls_total=c) for p, c in self.calls.items()]

    def processes(self) -> list[Any]:
        return [*self.others(HOLDER), SimpleNamespace(pid=HOLDER_PID, tenant_id=HOLDER, calls_total=0)]

    def registered(self) -> dict[tuple[int, int], int]:
        return {}


def certifier(fake: Fake, sample_s: float = 0.0) -> Certifier:
    processes = SimpleNamespace(running=lambda gpu: fake.running, activity=lambda gpu, since: alive_only(fake.running))
    return Certifier(0, fake, processes, {HOLDER_PID: HOLDER, OTHER_PID: 2, UNGATED_PID: 3}.get,  # type: ignore[arg-type]
                     lambda pid: pid != FOREIGN_PID, lambda gpu: fake.clock, sample_s=sample_s)


def verdict(fake: Fake, change: Any, sample_s: float = 0.0) -> tuple[str, list[str]]:
    c = certifier(fake, sample_s)
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
    # The gate's count is the tenant's own to write: it condemns the region only
    # where the GPU shows that process's work too (issue 47, F4).
    v, reasons = verdict(Fake(), lambda f: f.calls.update({OTHER_PID: 7}))
    assert v == "unknown" and reasons[0] == (
        "gate: tenant 2 (pid 200) made 2 GPU call(s) through it by its own count, and the GPU shows no work of it: "
        "not believed, not ruled out"), reasons

    def counted(f: Fake) -> None:  # a GPU that counts work per process (the simulator's)
        f.running = {pid: GpuProcess(pid, 3, False) for pid in (HOLDER_PID, OTHER_PID)}
    fake = Fake()
    counted(fake)
    v, reasons = verdict(fake, lambda f: (f.calls.update({OTHER_PID: 7}), f.running.update(
        {OTHER_PID: GpuProcess(OTHER_PID, 5, False)})))
    assert v == "violated" and reasons[:2] == [
        "gate: tenant 2 (pid 200) made 2 GPU call(s) through it",
        "processes: tenant 2 (pid 200) ran 2 item(s) the gate did not hold"], reasons
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



def test_a_tenants_process_the_gate_cannot_hold_violates_alive_or_ended() -> None:
    """NVML counts no work: a tenant's process on the GPU with no entry in its
    gate (no interception library) is a violation, at the release or seen
    during the hold and gone by then (issue 47, F5); a gated tenant's process
    that ends during the hold is not."""
    v, reasons = verdict(Fake(), lambda f: f.running.update({UNGATED_PID: GpuProcess(UNGATED_PID, None, True)}))
    assert v == "violated" and reasons[0] == (
        "processes: tenant 3 (pid 400) used the GPU with no entry in its gate (no interception library: "
        "the gate cannot hold it)"), reasons

    def comes_and_goes(f: Fake) -> None:
        f.running[UNGATED_PID] = GpuProcess(UNGATED_PID, None, True)
        time.sleep(0.2)  # sampled meanwhile
        del f.running[UNGATED_PID]
    v, reasons = verdict(Fake(), comes_and_goes, sample_s=0.01)
    assert v == "violated" and reasons[0].endswith("the gate cannot hold it), and ended before the release"), reasons
    v, reasons = verdict(Fake(), lambda f: f.running.pop(OTHER_PID), sample_s=0.01)
    assert v == "verified", reasons
