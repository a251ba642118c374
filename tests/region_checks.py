"""Invariants of the region protocol, checked from a run's trace and the
simulator's execution log (the ground truth of what executed when).

A region over a set of GPUs has a row per GPU in the trace, each with the
one region id and `gpus`: every check here works per (GPU, region) row, and
`check_sets` checks what only sets have (every GPU of the set held at once,
one id, one holder)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from krex_runtime.sim.execution_log import read_execution_log
from krex_runtime.sim.layout import KIND_KERNEL, KIND_MEMCPY_DTOD, KIND_MEMCPY_DTOH, KIND_MEMCPY_HTOD, KIND_MEMSET
from krex_runtime.testing.hygiene import held_back, is_frozen  # noqa: F401 (is_frozen: for the region tests)
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

WORK_KINDS = {KIND_KERNEL, KIND_MEMCPY_HTOD, KIND_MEMCPY_DTOH, KIND_MEMCPY_DTOD, KIND_MEMSET}


@dataclass
class HeldRegion:
    gpu: int
    region: int
    tenant_id: int
    granted_ns: int
    released_ns: int
    calls_at_grant: int
    calls_at_release: int
    gpus: tuple[int, ...] = ()  # a region over a set: the set; (): one GPU


def regions_of(trace_path: Path) -> tuple[list[dict], list[HeldRegion]]:
    events = read_trace(trace_path).events
    granted: dict[tuple[int, int], dict] = {}  # (gpu, region): a set's region has a row per GPU
    held = []
    for e in events:
        if e["type"] == "region_granted":
            granted[(e["gpu"], e["region"])] = e
        elif e["type"] == "region_released" and (e["gpu"], e["region"]) in granted:
            g = granted.pop((e["gpu"], e["region"]))
            held.append(
                HeldRegion(
                    g["gpu"], g["region"], g["tenant_id"], g["granted_mono_ns"], e["released_mono_ns"],
                    g["others_calls"], e["others_calls"], tuple(g.get("gpus") or ()),
                )
            )
    assert not granted, f"regions granted but never released: {sorted(granted)}"
    return events, held


def check_one_holder_per_gpu(events: list[dict]) -> None:
    holder: dict[int, int | None] = {}
    for e in events:
        if e["type"] == "region_granted":
            assert holder.get(e["gpu"]) is None, f"two holders on GPU {e['gpu']}: {holder[e['gpu']]} and {e['region']}"
            holder[e["gpu"]] = e["region"]
        elif e["type"] == "region_released":
            assert holder.get(e["gpu"]) == e["region"]
            holder[e["gpu"]] = None


def check_fifo(events: list[dict]) -> None:
    """Regions are granted in the order they were requested, per GPU (leases go first;
    a set's region is requested on each GPU once the GPU before it is held)."""
    requested: dict[int, list[int]] = {}
    granted: dict[int, list[int]] = {}
    withdrawn = {e["region"] for e in events if e["type"] == "region_withdrawn"}
    for e in events:
        if e["type"] == "region_requested" and e["kind"] == "region" and e["region"] not in withdrawn:
            requested.setdefault(e["gpu"], []).append(e["region"])
        elif e["type"] == "region_granted" and e["kind"] == "region":
            granted.setdefault(e["gpu"], []).append(e["region"])
    for gpu, order in granted.items():
        assert order == requested[gpu][: len(order)], f"GPU {gpu}: granted {order}, requested {requested[gpu]}"


def tenant_gpus(events: list[dict]) -> dict[int, set[int]]:
    """Each tenant's GPUs: its one GPU, or its set."""
    return {e["tenant_id"]: set(e.get("gpus") or [e["gpu"]]) for e in events if e["type"] == "command_started"}


def check_no_submissions_while_held(held: list[HeldRegion]) -> None:
    """The interception counters of the other tenants did not move while a region
    was held (the GPU's ground truth, where no execution log exists). A tenant
    that exits during a region takes its counts with it, so the figure may drop."""
    for region in held:
        assert region.calls_at_release <= region.calls_at_grant, (
            f"other tenants made {region.calls_at_release - region.calls_at_grant} GPU calls during region "
            f"{region.region} on GPU {region.gpu}"
        )


def check_exclusive(events: list[dict], held: list[HeldRegion], sim_log: Path) -> int:
    """No other tenant's work of the same GPU executed while a region was held.
    Returns how many work records the check looked at."""
    gpus = tenant_gpus(events)
    records = [r for r in read_execution_log(sim_log) if r.kind in WORK_KINDS]
    for region in held:
        for r in records:
            # Work on the region's GPU by another tenant (the simulator logs the device each ran on).
            if r.tenant_id == region.tenant_id or region.gpu not in gpus.get(r.tenant_id, set()):
                continue
            if r.device >= 0 and r.device != region.gpu:  # a set's tenant's work on another of its GPUs
                continue
            assert not (r.start_ns < region.released_ns and r.end_ns > region.granted_ns), (
                f"tenant {r.tenant_id} ran {r.kind_name} [{r.start_ns}, {r.end_ns}] during region {region.region} "
                f"of tenant {region.tenant_id} [{region.granted_ns}, {region.released_ns}] on GPU {region.gpu}"
            )
    return len(records)


def check_sets(events: list[dict], held: list[HeldRegion]) -> int:
    """Each region over a set of GPUs was held on every GPU of its set at once
    (its holder was answered only once all were granted), by one tenant, under
    one id; each released row names the same set. Returns how many sets."""
    by_id: dict[int, list[HeldRegion]] = {}
    for h in held:
        if h.gpus:
            by_id.setdefault(h.region, []).append(h)
    for region, rows in by_id.items():
        assert sorted(r.gpu for r in rows) == list(rows[0].gpus), f"region {region}: rows on {[r.gpu for r in rows]}"
        assert len({(r.tenant_id, r.gpus) for r in rows}) == 1, f"region {region}: rows disagree: {rows}"
        all_held = max(r.granted_ns for r in rows)
        assert all_held < min(r.released_ns for r in rows), f"region {region}: its GPUs were never held all at once"
    released = {(e["gpu"], e["region"]): e for e in events if e["type"] == "region_released"}
    for h in held:
        if h.gpus:
            assert tuple(released[(h.gpu, h.region)].get("gpus") or ()) == h.gpus
    return len(by_id)


def check_nothing_left(run_dir: Path, within_s: float = 10.0) -> None:
    """Every gate open with nobody parked, no cgroup of ours frozen, no tenant
    stopped, within `within_s` (parked threads wake on their own time)."""
    try:
        wait_until(lambda: not held_back(run_dir), within_s, "nothing held back")
    except AssertionError:
        raise AssertionError(f"left held back: {held_back(run_dir)}") from None


def check_regions_ran(rt: Runtime, ids: list[str], regions: int) -> None:
    """Each command of `ids` ended with status 0, each of its `regions`
    regions without an error."""
    for command_id in ids:
        done = rt.krex("wait", command_id)
        assert done.returncode == 0, done.stderr
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert [r.get("error") for r in results] == [None] * regions, results


def check_held_alone(rt: Runtime) -> tuple[list[dict], list[HeldRegion], int]:
    """Once every tenant is done: nothing left behind, the runtime stopped,
    and in its trace each region held alone on its GPU, granted in order,
    while no other tenant submitted or ran work there, and certified
    `verified`. Returns the trace's events, its held regions and how many
    work records the simulator logged."""
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    check_one_holder_per_gpu(events)
    check_fifo(events)
    check_no_submissions_while_held(held)
    records = check_exclusive(events, held, rt.root / "sim.log")
    verdicts = [e for e in events if e["type"] == "region_released"]
    assert {e["verdict"] for e in verdicts} == {"verified"}, [e["verdict_reasons"] for e in verdicts
                                                             if e["verdict"] != "verified"][:3]
    return events, held, records
