"""A region's entry and exit stats are typed inside the runtime
(regions/region_stats.py) and become the region events' fields only where the
events are made: the trace must read exactly as the events' own defaults and
the clock probe's keys make it, whatever the probe could read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from krex_runtime.regions.region_stats import EntryStats, ExitStats
from krex_runtime.wire.state import events
from krex_runtime.wire.state.event_base import to_wire

FULL_CLOCK = {
    "sm_clock_mhz": 1980.0, "throttle": ["sw_power_cap"], "power_w": 512.5, "temp_c": 61.0,
    "top_clock_mhz": 1980.0, "on_clock": True, "flags": ["throttled:sw_power_cap"],
}
# What settle.py writes when the probe fails: no power, temperature or top clock.
FAILED_CLOCK = {"sm_clock_mhz": None, "throttle": None, "flags": [], "on_clock": None}
BARE_CLOCK: dict[str, Any] = {}  # a probe that reads nothing at all


def wire(event: events.Event) -> str:
    return json.dumps(to_wire(event), sort_keys=False)


@pytest.mark.parametrize("clock", [FULL_CLOCK, FAILED_CLOCK, BARE_CLOCK], ids=["full", "failed", "bare"])
def test_granted_reads_as_the_clock_and_steps_make_it(clock: dict[str, Any]) -> None:
    settled = clock | {"settle_s": 0.002, "on_clock": clock.get("on_clock")}
    stats = EntryStats(wait_s=0.5, gap_s=0.001)
    stats.close_s, stats.quiesce_s, stats.drain_s, stats.freeze_s, stats.pin_s = 0.1, 0.2, 0.3, 0.4, 0.5
    stats.inside_at_close, stats.waited_for = {"launch": 2}, {"launch": 1}
    stats.deferred = {"4242": {"module": 1}}
    stats.take_clock(settled)
    stats.settle_max_s, stats.enter_s, stats.others_calls, stats.granted_mono_ns = 0.5, 1.6, 17, 123456789
    head = dict(gpu=0, region=3, kind="region", tenant_id=2, command_id="c-1", frozen=[1], drain={"99": "ok"})
    # The trace as the stats once made it: a dict of what was measured, the event's defaults for the rest.
    as_dict = {
        "wait_s": 0.5, "gap_s": 0.001, "close_s": 0.1, "quiesce_s": 0.2, "inside_at_close": {"launch": 2},
        "waited_for": {"launch": 1}, "drain_s": 0.3, "deferred": {"4242": {"module": 1}}, "freeze_s": 0.4,
        "pin_s": 0.5,
    } | settled | {"settle_max_s": 0.5, "enter_s": 1.6, "others_calls": 17, "granted_mono_ns": 123456789}
    assert wire(events.RegionGranted(**head, **stats.event_fields())) == wire(events.RegionGranted(**head, **as_dict))


@pytest.mark.parametrize("clock", [FULL_CLOCK, FAILED_CLOCK, BARE_CLOCK], ids=["full", "failed", "bare"])
def test_released_reads_as_the_clock_and_steps_make_it(clock: dict[str, Any]) -> None:
    stats = ExitStats(
        held_back=3, unpin_s=0.01, thaw_s=0.02, late_frozen=[5], open_s=0.03, released_mono_ns=987654321,
        others_calls=17, verdict="verified", verdict_reasons=["gate: clean"], integrity=None,
    )
    stats.take_clock(clock)
    head = dict(gpu=1, region=3, kind="region", tenant_id=2, reason="released", hold_s=0.25, share="default")
    as_dict = {
        "held_back": 3, "unpin_s": 0.01, "thaw_s": 0.02, "late_frozen": [5], "open_s": 0.03,
        "released_mono_ns": 987654321, "others_calls": 17, "verdict": "verified", "verdict_reasons": ["gate: clean"],
        "integrity": None,
    } | {f"exit_{k}": clock.get(k) for k in ("sm_clock_mhz", "power_w", "temp_c", "throttle", "on_clock")} | {
        "exit_flags": list(clock.get("flags") or []),
    }
    assert wire(events.RegionReleased(**head, **stats.event_fields())) == wire(events.RegionReleased(**head, **as_dict))


def test_a_grant_without_a_clock_reading_leaves_the_events_defaults() -> None:
    stats = EntryStats(wait_s=0.0, gap_s=0.0)
    stats.take_clock({})
    fields = to_wire(events.RegionGranted(gpu=0, region=1, kind="lease", tenant_id=0, drain={},
                                             **stats.event_fields()))
    assert "top_clock_mhz" not in fields  # omitted when None, as before
    assert fields["flags"] is None and fields["sm_clock_mhz"] is None and fields["settle_s"] is None
