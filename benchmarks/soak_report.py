"""What a soak (soak.py) records of its commands and runtime starts, and how
it reports them: outcomes from the trace, the runtime's RSS over each life,
the tallies of the result and its table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.wire.trace.jsonl import TraceError, read_trace, replay


@dataclass
class Command:
    id: str
    gpu: int
    kind: str  # "load" or the fault it carries
    life: int  # which runtime start it was submitted to
    pid: int | None = None
    outcome: str | None = None  # from the trace: state, exit code or signal
    output_lost: int = 0  # bytes its output files did not get (the disk was full)
    kill_on_grant: bool = False
    released: list[str] = field(default_factory=list)  # why each of its regions ended


@dataclass
class Life:
    """One start of the runtime: its trace, how it ended, its commands."""

    number: int
    trace: Path
    pid: int = 0
    ended_by: str = ""  # "sigkill", "sigterm", "end"
    commands: list[str] = field(default_factory=list)
    fds_idle: dict[int, str] = field(default_factory=dict)
    killed_at: float = 0.0  # time.time() of the signal that ended it


def outcome_of(event: dict[str, Any]) -> str:
    state = event["state"]
    if event.get("signal"):
        return f"{state} (signal {event['signal']})"
    if state == "finished":
        return f"finished (exit {event.get('exit_code')})"
    return state


def rss_summary(samples: list[dict[str, Any]], min_span_min: float) -> dict[str, Any]:
    """Start, max and end over the run and per life; the slope (least squares)
    over the second half of the longest life (the first half is its warm-up),
    where that half spans at least `min_span_min` minutes."""
    summary: dict[str, Any] = {"start_kib": None, "max_kib": None, "end_kib": None, "slope_kib_per_min": None,
                               "slope_life": None, "lives": {}}
    if not samples:
        return summary
    lives: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        lives.setdefault(s["life"], []).append(s)
    summary.update(start_kib=samples[0]["rss_kib"], max_kib=max(s["rss_kib"] for s in samples),
                   end_kib=samples[-1]["rss_kib"])
    summary["lives"] = {
        str(n): {"samples": len(own), "span_min": round((own[-1]["t_s"] - own[0]["t_s"]) / 60, 1),
                 "start_kib": own[0]["rss_kib"], "max_kib": max(s["rss_kib"] for s in own),
                 "end_kib": own[-1]["rss_kib"]}
        for n, own in lives.items()
    }
    longest = max(lives, key=lambda n: lives[n][-1]["t_s"] - lives[n][0]["t_s"])
    half = lives[longest][len(lives[longest]) // 2 :]
    ts = [s["t_s"] / 60 for s in half]
    if len(half) >= 3 and ts[-1] - ts[0] >= min_span_min:
        ys = [s["rss_kib"] for s in half]
        mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
        summary["slope_kib_per_min"] = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / sum((t - mt) ** 2 for t in ts)
        summary["slope_life"] = longest
    return summary


def account(life: Life, commands: dict[str, Command]) -> list[str]:
    """Every command of `life` has its end in the life's trace (or the life
    was SIGKILLed): each one's pid, outcome, output lost and why its regions
    ended, read from the trace; the failures found."""
    failures: list[str] = []
    try:
        trace = read_trace(life.trace)
        replay(trace)
    except (TraceError, KeyError, ValueError) as exc:
        return [f"life {life.number}: trace does not read or replay: {exc}"]
    queued = {e["id"] for e in trace.events if e["type"] == "command_queued"}
    finished = {e["id"]: e for e in trace.events if e["type"] == "command_finished"}
    granted: dict[int, Command] = {}
    for e in trace.events:
        if e["type"] == "command_started" and e["id"] in commands:
            commands[e["id"]].pid = e["pid"]
        elif e["type"] == "region_granted" and e.get("command_id") in commands:
            granted[e["region"]] = commands[e["command_id"]]
        elif e["type"] == "region_released" and e["region"] in granted:
            granted.pop(e["region"]).released.append(e["reason"])
    for command_id in life.commands:
        cmd = commands[command_id]
        if command_id not in queued:
            failures.append(f"life {life.number}: command {command_id} was accepted but is not in the trace")
        elif command_id in finished:
            cmd.outcome = outcome_of(finished[command_id])
            cmd.output_lost = sum((finished[command_id].get("output_lost") or {}).values())
        elif life.ended_by == "sigkill":
            cmd.outcome = "ended by restart"
        else:
            failures.append(f"life {life.number}: command {command_id} ({cmd.kind}) has no end in the trace")
            cmd.outcome = "missing"
    if life.ended_by != "sigkill" and trace.events[-1]["type"] != "runtime_stopped":
        failures.append(f"life {life.number}: trace does not end with runtime_stopped")
    return failures


def tallies(commands: Iterable[Command]) -> dict[str, Any]:
    """The result's counts of the commands: by outcome, by the fault each
    carried, why the faulty ones' regions ended, and output the full disk lost."""
    commands = list(commands)
    outcomes = Counter(c.outcome or "unknown" for c in commands)
    by_fault: dict[str, Counter[str]] = {}
    released: dict[str, Counter[str]] = {}
    for c in commands:
        if c.kind != "load":
            by_fault.setdefault(c.kind, Counter())[c.outcome or "unknown"] += 1
            for reason in c.released:
                released.setdefault(c.kind, Counter())[reason.split(" (")[0]] += 1
    return {
        "outcomes": dict(outcomes.most_common()),
        "output_lost": {"commands": sum(1 for c in commands if c.output_lost),
                        "bytes": sum(c.output_lost for c in commands)},
        "fault_outcomes": {k: dict(v) for k, v in sorted(by_fault.items())},
        "fault_region_ends": {k: dict(v) for k, v in sorted(released.items())},
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"# soak — {r['machine']}, {r['gpus']} GPUs x {r['tenants_per_gpu']} tenants, {r['duration_s']:.0f} s, "
          f"{r['runtime_starts']} runtime start(s)")
    print(f"{'commands by outcome':<44} {'count':>7}")
    for outcome, n in r["outcomes"].items():
        print(f"  {outcome:<42} {n:>7}")
    print(f"  {'submitted':<42} {r['submitted']:>7}")
    print(f"{'faults injected':<44} {'count':>7}")
    for kind, n in r["faults"].items():
        outcomes = ", ".join(f"{k}: {v}" for k, v in r["fault_outcomes"].get(kind, {}).items())
        print(f"  {kind:<42} {n:>7}   {outcomes}")
        ends = ", ".join(f"{k}: {v}" for k, v in r["fault_region_ends"].get(kind, {}).items())
        if ends:
            print(f"  {'':<42} {'':>7}   regions ended: {ends}")
    rss, fds = r["rss"], r["fds"]
    slope = (f"{rss['slope_kib_per_min']:.1f} KiB/min (second half of life {rss['slope_life']})"
             if rss["slope_kib_per_min"] is not None else "n/a (no life long enough)")
    print(f"{'runtime RSS (KiB)':<44} start {rss['start_kib']}  max {rss['max_kib']}  end {rss['end_kib']}  "
          f"slope {slope}")
    for n, life in rss["lives"].items():
        print(f"  life {n:<37} {life['span_min']:>5} min  start {life['start_kib']}  max {life['max_kib']}  "
              f"end {life['end_kib']}")
    if fds:
        print(f"{'runtime descriptors':<44} start {fds['start']}  max {fds['max']}  end {fds['end']}")
    lost = r["output_lost"]
    print(f"{'output lost to the full disk':<44} {lost['commands']:>7} commands, {lost['bytes']} bytes "
          f"(disk: {r['disk']})")
    floods = r["flood_status_s"]
    print(f"{'status during floods':<44} {floods['count']:>7} answered, slowest {floods['max']} s")
    print(f"{'leaks and lost commands':<44} {len(r['failures']):>7}")
    for line in r["failures"][:20]:
        print(f"  {line}")
    print("RESULT:", "ok" if r["ok"] else "FAILED")
