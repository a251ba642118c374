"""What the console remembers of the events it saw: the audit log and the
region records the GPU detail's timeline is made of (the trace has all)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

KEEP_EVENTS = 5000
KEEP_REGIONS_PER_GPU = 200


@dataclass
class RegionRecord:
    """One region as the timeline shows it: granted, then (maybe) released."""

    gpu: int
    region: int
    kind: str
    tenant_id: int
    command_id: str
    granted_t: float
    stats: dict[str, Any]
    frozen: list[int]
    released_t: float | None = None
    reason: str = ""
    verdict: str = ""  # its certificate's, at its release ("" before, and in traces older than certificates)


class EventLog:
    """The recent events (the audit log) and region records built from them."""

    def __init__(self) -> None:
        # Each event with the start of the runtime run it belongs to: a
        # replayed trace of a runtime that restarted holds two runs, and each
        # event's time is shown from its own run's start. None: this log has
        # not seen the run start (a console that attached mid-run).
        self.events: deque[tuple[dict[str, Any], float | None]] = deque(maxlen=KEEP_EVENTS)
        self.run_start: float | None = None
        self.regions: dict[int, OrderedDict[int, RegionRecord]] = {}
        self.generation = 0  # bumped when the log restarts, so views rebuild
        # Events ever added: each event's number, what a view keys its row by.
        # A seq is no identity here: a trace of a runtime that restarted numbers
        # each run from 1 again, and a trace_gap record has no seq.
        self.added = 0

    def clear(self, run_start: float | None = None) -> None:
        """Forget every event; `run_start` is the start of the run the next
        events belong to, where the caller knows it (a replay's seek)."""
        self.events.clear()
        self.regions.clear()
        self.run_start = run_start
        self.generation += 1

    def newest_first(self) -> Iterator[tuple[int, dict[str, Any], float | None]]:
        """(number, event, its run's start) from the newest; no two events of
        the log, before or after a clear, share a number."""
        number = self.added
        for event, run_start in reversed(self.events):
            yield number, event, run_start
            number -= 1

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "runtime_started":
            self.run_start = event.get("t")
        self.events.append((event, self.run_start))
        self.added += 1
        if kind == "region_granted":
            per_gpu = self.regions.setdefault(event["gpu"], OrderedDict())
            per_gpu[event["region"]] = RegionRecord(
                gpu=event["gpu"],
                region=event["region"],
                kind=event.get("kind", ""),
                tenant_id=event.get("tenant_id", -1),
                command_id=event.get("command_id", ""),
                granted_t=event.get("t", 0.0),
                stats={k: v for k, v in event.items() if k.endswith("_s")},
                frozen=list(event.get("frozen", [])),
            )
            while len(per_gpu) > KEEP_REGIONS_PER_GPU:
                per_gpu.popitem(last=False)
        elif kind == "region_released":
            record = self.regions.get(event["gpu"], {}).get(event["region"])
            if record is not None:
                record.stats |= {k: v for k, v in event.items() if k.endswith("_s")}
                record.released_t = event.get("t")
                record.reason = event.get("reason", "")
                record.verdict = str(event.get("verdict") or "")

    def regions_of_gpu(self, gpu: int) -> list[RegionRecord]:
        return list(self.regions.get(gpu, {}).values())

    def regions_of_command(self, command_id: str) -> list[RegionRecord]:
        return [r for per_gpu in self.regions.values() for r in per_gpu.values() if r.command_id == command_id]
