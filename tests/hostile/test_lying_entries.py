"""What a tenant writes into its own gate entries is a hint, checked against
what the runtime observes (regions/entry/hints.py), on real runtimes with
simulated GPUs.

- F3 (issue 47): a tenant writes a LIVE entry for one of its own processes
  that never touched CUDA, claiming a call in flight. Every other tenant's
  region on the GPU waited the quiesce bound and was refused, for as long as
  the liar ran. Now the claim is not believed (the GPU knows no context of
  that process): the region is granted at once, and its reasons name the
  lie. A claim from a process the GPU does know delays a region by the
  operator's bound at most: then its tenant is frozen, the region granted,
  its verdict `unknown` naming it.
- F4: a tenant adds to `calls_total` in its own entry during another's
  hold, having made no GPU call. The region was certified `violated`; now a
  count the GPU does not bear out makes it `unknown`, naming the tenant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime_helpers import (
    PY,
    TENANTS,
    HeldRegions,
    finish,
    krex_runtime,
    output,
    region_results,
    snapshot,
    submit,
    trace_events,
)

from krex_runtime.regions.gate import header_layout as gate_layout
from krex_runtime.testing.local_runtime import wait_until

QUIESCE_S = 3.0

# Writes into the tenant's own entries file, as any process of its uid can.
# argv: mode, trigger file, then the layout's offsets (the test passes them).
LIAR = r"""
import json, mmap, os, struct, sys, time
mode, trigger = sys.argv[1], sys.argv[2]
off = json.loads(sys.argv[3])
size = off["proc_size"]
path = os.environ["KREX_GATE_PATH"] + "." + os.environ["KREX_TENANT_ID"]

def start_time(pid):
    text = open(f"/proc/{pid}/stat").read()
    return int(text[text.rfind(")") + 2:].split()[19])

if mode in ("cuda", "count"):  # a real CUDA process first: the library registers it, the GPU knows it
    from krex_runtime.sim.simcuda import SimCuda
    SimCuda().time_kernel(100_000, repeats=1)
fd = os.open(path, os.O_RDWR)
mm = mmap.mmap(fd, 0)
def u32(i, name, value=None, fmt="<I"):
    at = i * size + off[name]
    if value is None:
        return struct.unpack_from(fmt, mm, at)[0]
    struct.pack_into(fmt, mm, at, value)
entries = len(mm) // size
mine = next((i for i in range(entries) if u32(i, "state") == 2 and u32(i, "pid", fmt="<i") == os.getpid()), None)
print("ready", mine, flush=True)
while not os.path.exists(trigger):
    time.sleep(0.01)
if mode == "count":  # its own, real entry: more calls than it made
    u32(mine, "calls_total", u32(mine, "calls_total", fmt="<Q") + 5, fmt="<Q")
else:  # a call in flight: in a free entry for itself (never touched CUDA), or in its real one
    i = mine if mine is not None else next(i for i in range(entries) if u32(i, "state") == 0)
    u32(i, "pid", os.getpid(), fmt="<i")
    u32(i, "start_time", start_time(os.getpid()), fmt="<Q")
    for name in ("in_call", "in_perturbing", "uses_cuda", "contexts"):
        u32(i, name, 1)
    u32(i, "in_class", 1, fmt="<H")  # launch
    u32(i, "state", 2)
print("lied", flush=True)
time.sleep(600)
"""

def _offsets() -> str:
    found = {name: off for name, (_, off) in gate_layout.PROC.items()}
    return json.dumps(found | {"proc_size": gate_layout.PROC_SIZE})


def _lines(rt: Any, command_id: str) -> list[str]:
    return output(rt, command_id).splitlines()


def _tenant(rt: Any, command_id: str) -> int:
    return next(c["tenant_id"] for c in snapshot(rt)["commands"] if c["id"] == command_id)


def _liar(rt: Any, mode: str, trigger: Path) -> str:
    liar = submit(rt, PY, "-c", LIAR, mode, str(trigger), _offsets(), gpu=0)
    wait_until(lambda: any(line.startswith("ready") for line in _lines(rt, liar)), 60, "the liar")
    return liar


def _region(rt: Any, tmp_path: Path) -> HeldRegions:
    """The victim: warm on GPU 0, its region granted, running kernels in it until released."""
    victim = HeldRegions(rt, tmp_path / "victim", "launch", gpu=0)
    victim.go(0)
    victim.granted(0)
    return victim


def _result(rt: Any, victim: HeldRegions) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Releases the victim's region: its verdict, and the trace's grant and release of it."""
    result = victim.release(0)
    granted = next(e for e in trace_events(rt, "region_granted") if e["region"] == result["region"])
    released = next(e for e in trace_events(rt, "region_released") if e["region"] == result["region"])
    return result, granted, released


def test_a_claim_of_a_call_in_flight_from_a_process_without_cuda_delays_no_region(
        make_runtime: Any, tmp_path: Path) -> None:
    rt = krex_runtime(make_runtime, quiesce_timeout_s=QUIESCE_S)
    trigger = tmp_path / "trigger"
    liar = _liar(rt, "claim", trigger)
    trigger.touch()
    wait_until(lambda: "lied" in _lines(rt, liar), 60, "the lie")
    # Regions one after another, as long as the liar runs: each granted at once.
    done = rt.krex("run", "--gpu", "0", "--", PY, str(TENANTS / "regions.py"), "--regions", "3", "--kernel-us", "200")
    assert done.returncode == 0, done.stderr
    assert all("times_ms" in r for r in region_results(done.stdout)), done.stdout
    granted = [e for e in trace_events(rt, "region_granted") if e["kind"] == "region"]
    assert len(granted) == 3 and all(e["enter_s"] < QUIESCE_S / 2 for e in granted), [e["enter_s"] for e in granted]
    released = [e for e in trace_events(rt, "region_released") if e["kind"] == "region"]
    lie = f"not believed: tenant {_tenant(rt, liar)}'s entry for pid "
    assert all(any(r.startswith("gate: ") and lie in r and "the GPU knows no context of that process" in r
                   for r in e["verdict_reasons"]) for e in released), [e["verdict_reasons"] for e in released]
    assert {e["verdict"] for e in released} <= {"verified", "perturbed"}, [e["verdict_reasons"] for e in released]
    finish(rt, liar)


def test_a_claim_from_a_cuda_process_delays_a_region_by_the_quiesce_bound_at_most(
        make_runtime: Any, tmp_path: Path) -> None:
    rt = krex_runtime(make_runtime, quiesce_timeout_s=QUIESCE_S, protection="gpu-only")
    trigger = tmp_path / "trigger"
    liar = _liar(rt, "cuda", trigger)
    trigger.touch()
    wait_until(lambda: "lied" in _lines(rt, liar), 60, "the lie")
    victim = _region(rt, tmp_path)
    result, granted, released = _result(rt, victim)
    assert QUIESCE_S <= granted["enter_s"] < QUIESCE_S + 2, granted["enter_s"]
    assert granted["frozen"] == [_tenant(rt, liar)], granted  # under gpu-only: the liar alone
    assert result["verdict"] == "unknown", released["verdict_reasons"]
    assert released["verdict_reasons"][0].startswith(
        f"gate: tenant {_tenant(rt, liar)} (pid "), released["verdict_reasons"]
    assert "still claimed a GPU call in flight at the 3 s quiesce bound: frozen" in released["verdict_reasons"][0]
    finish(rt, liar, victim.id)


def test_a_count_a_tenant_wrote_does_not_condemn_another_tenants_region(make_runtime: Any, tmp_path: Path) -> None:
    rt = krex_runtime(make_runtime, protection="gpu-only")
    trigger = tmp_path / "trigger"
    liar = _liar(rt, "count", trigger)
    victim = _region(rt, tmp_path)
    trigger.touch()  # inside the region: 5 calls more, none made
    wait_until(lambda: "lied" in _lines(rt, liar), 60, "the lie")
    result, _, released = _result(rt, victim)
    assert result["verdict"] == "unknown", released["verdict_reasons"]
    assert released["verdict_reasons"][0].startswith(f"gate: tenant {_tenant(rt, liar)} (pid ")
    assert "made 5 GPU call(s) through it by its own count, and the GPU shows no work of it" in \
        released["verdict_reasons"][0], released["verdict_reasons"]
    assert any(r.startswith("processes: only the holder ran work") for r in released["verdict_reasons"])
    finish(rt, liar, victim.id)

