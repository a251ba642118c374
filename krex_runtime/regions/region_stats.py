"""What a region's entry and exit measured of themselves: typed here, turned
into the `region_granted` / `region_released` events' fields only where the
event is made (gpu_regions.py), so the trace keeps its names and values.

Each field is one of the event's (krex_runtime/wire/state/events.py says what it
means); a default is the event's own default, so a step that did not run, or
a clock that could not be read, writes what the event would have written
without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

# What the clock probe reads (telemetry/clocks.py) that both the grant and the release record.
_CLOCK_KEYS = ("sm_clock_mhz", "throttle", "power_w", "temp_c", "on_clock")


def _take_clock(stats: Any, clock: dict[str, Any], prefix: str) -> None:
    for key in _CLOCK_KEYS:
        setattr(stats, prefix + key, clock.get(key))


def _event_fields(stats: Any) -> dict[str, Any]:
    """The stats as the event's keyword arguments (shallow: the event holds the same lists)."""
    return {f.name: getattr(stats, f.name) for f in fields(stats)}


@dataclass
class EntryStats:
    """The steps of an entry, timed, and the GPU's clock at the grant."""

    wait_s: float  # queued, up to the entry's first step
    gap_s: float  # the gate's open time before it (gap.py)
    host_side_s: float = 0.0
    host_side_left: int = 0
    close_s: float = 0.0
    quiesce_s: float = 0.0
    inside_at_close: dict[str, int] = field(default_factory=dict)
    waited_for: dict[str, int] = field(default_factory=dict)
    drain_s: float = 0.0
    deferred: dict[str, dict[str, int]] = field(default_factory=dict)
    freeze_s: float = 0.0
    pin_s: float = 0.0
    settle_s: float | None = None
    settle_max_s: float = 0.0
    enter_s: float = 0.0
    # The clock at the grant, as the probe read it (entry/settle.py); None: not read.
    sm_clock_mhz: float | None = None
    throttle: list[str] | None = None
    power_w: float | None = None
    temp_c: float | None = None
    top_clock_mhz: float | None = None
    on_clock: bool | None = None
    flags: list[str] | None = None
    others_calls: int = 0
    granted_mono_ns: int = 0

    def take_clock(self, clock: dict[str, Any]) -> None:
        """The settle step's reading: the clock at the grant and how long it waited for it."""
        _take_clock(self, clock, "")
        self.top_clock_mhz = clock.get("top_clock_mhz")
        self.flags = clock.get("flags")
        self.settle_s = clock.get("settle_s")

    def event_fields(self) -> dict[str, Any]:
        return _event_fields(self)


@dataclass
class ExitStats:
    """The steps of an exit, timed, the certificate's verdict and the GPU's clock at the release."""

    held_back: int
    unpin_s: float
    thaw_s: float
    late_frozen: list[int]
    open_s: float
    released_mono_ns: int
    others_calls: int
    verdict: str
    verdict_reasons: list[str]
    integrity: dict[str, Any] | None
    exit_sm_clock_mhz: float | None = None
    exit_power_w: float | None = None
    exit_temp_c: float | None = None
    exit_throttle: list[str] | None = None
    exit_on_clock: bool | None = None
    exit_flags: list[str] = field(default_factory=list)

    def take_clock(self, clock: dict[str, Any]) -> None:
        """The probe's reading at the release."""
        _take_clock(self, clock, "exit_")
        self.exit_flags = list(clock.get("flags") or [])

    def event_fields(self) -> dict[str, Any]:
        return _event_fields(self)
