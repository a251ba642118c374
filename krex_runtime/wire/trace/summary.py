"""What `krex trace FILE` prints of a trace: counts, durations, per-GPU
concurrency, and each GPU's region figures (entry and hold quantiles, the
certificates' verdicts) and the leases."""

from __future__ import annotations

from typing import Any

from krex_runtime.wire.state import apply as node_state
from krex_runtime.wire.state.model import NodeState
from krex_runtime.wire.trace.jsonl import Trace


def summarize(trace: Trace) -> dict[str, Any]:
    """Figures `krex trace FILE` prints: counts, durations, per-GPU concurrency."""
    state = NodeState()
    started: dict[str, float] = {}
    queue_waits: list[float] = []
    run_times: list[float] = []
    running: dict[int, int] = {}
    peak: dict[int, int] = {}
    by_type: dict[str, int] = {}
    for event in trace.events:
        by_type[event["type"]] = by_type.get(event["type"], 0) + 1
        kind, t = event["type"], event.get("t", 0.0)
        if kind == "command_started":
            cmd = state.commands.get(event["id"])
            if cmd is not None:
                queue_waits.append(t - cmd.submitted_at)
            started[event["id"]] = t
            gpu = event["gpu"]
            running[gpu] = running.get(gpu, 0) + 1
            peak[gpu] = max(peak.get(gpu, 0), running[gpu])
        elif kind == "command_finished" and event["id"] in started:
            run_times.append(t - started.pop(event["id"]))
            cmd = state.commands.get(event["id"])
            if cmd is not None and cmd.gpu is not None:
                running[cmd.gpu] -= 1
        node_state.apply(state, event)
    first = trace.events[0].get("t", 0.0) if trace.events else 0.0
    last = trace.events[-1].get("t", 0.0) if trace.events else 0.0
    return {
        "node": trace.header.get("node", "?"),
        "policy": trace.header.get("policy", "?"),
        "gpus": len(trace.header.get("gpus", [])),
        "events": len(trace.events),
        "span_s": last - first,
        "events_by_type": by_type,
        "totals": dict(state.totals),
        "queue_wait_s": _quantiles(queue_waits),
        "run_s": _quantiles(run_times),
        "peak_running_per_gpu": {str(k): v for k, v in sorted(peak.items())},
        "unfinished": len(started),
        **_region_figures(trace.events),
    }


def _region_figures(trace_events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per GPU: regions' entry and hold times, flags, verdicts (when the
    runtime gives them) and the settle waits (how many regions waited, and
    the GPU time that cost: no tenant used the GPU meanwhile); leases apart,
    since an operator's hold says nothing of measurement."""
    per_gpu: dict[str, dict[str, Any]] = {}
    leases: dict[str, Any] = {"granted": 0, "hold_s": [], "reasons": {}}
    kinds: dict[tuple[Any, Any], str] = {}
    for e in trace_events:
        kind = e["type"]
        if kind not in ("region_granted", "region_released"):
            continue
        key = (e.get("gpu"), e.get("region"))
        if kind == "region_granted":
            kinds[key] = e.get("kind", "region")
        if kinds.get(key) == "lease":
            if kind == "region_granted":
                leases["granted"] += 1
            else:
                _add_number(leases["hold_s"], e.get("hold_s"))
                _tally(leases["reasons"], e.get("reason"))
            continue
        g = per_gpu.setdefault(str(e.get("gpu")), {"granted": 0, "enter_s": [], "hold_s": [], "flagged": 0, "verdicts": {},
                                                   "settled": 0, "settle_total_s": 0.0})
        if kind == "region_granted":
            g["granted"] += 1
            _add_number(g["enter_s"], e.get("enter_s"))
            g["flagged"] += 1 if e.get("flags") else 0
            waited = e.get("settle_s")
            if isinstance(waited, (int, float)) and waited > 0:
                g["settled"] += 1
                g["settle_total_s"] += float(waited)
        else:
            _add_number(g["hold_s"], e.get("hold_s"))
            if e.get("verdict") is not None:
                _tally(g["verdicts"], e.get("verdict"))
    for g in per_gpu.values():
        g["enter_s"], g["hold_s"] = _quantiles(g["enter_s"]), _quantiles(g["hold_s"])
    leases["hold_s"] = _quantiles(leases["hold_s"])
    return {"regions_per_gpu": dict(sorted(per_gpu.items())), "leases": leases}


def _add_number(values: list[float], value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        values.append(float(value))


def _tally(counts: dict[str, int], value: Any) -> None:
    name = str(value)
    counts[name] = counts.get(name, 0) + 1


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {"n": len(ordered), "p50": q(0.50), "p95": q(0.95), "p99": q(0.99), "max": ordered[-1]}
