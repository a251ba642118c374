"""How `krex status`, `krex show` and `krex trace` look to a person: rich
tables. A figure the runtime does not have (no region yet, no pool) reads
`-`. Every string that came from outside (a label, a command line, a node's
name, a trace's keys) goes in as rich Text, never as markup, its control
characters escaped (wire/printable.py): `[/x]` in a label is a label, not a
markup error, and ESC shows as `\\x1b`."""

from __future__ import annotations

import os
import shlex
import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from krex_runtime.api.results import NodeStatus, Result
from krex_runtime.wire.evaluation_record import outcome
from krex_runtime.wire.printable import printable

NA = "-"
COMMAND_WIDTH = 80  # of a command line in the commands table; the rest is cut with …


def fitted_table(headers: list[tuple[str, str]], rows: list[list[str]], width: int | None, flexible: str) -> Table:
    """A table whose columns keep their whole cells and headers (ids stay
    copyable), but for the `flexible` one, cut with … to what `width` leaves."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    rows = [[printable(cell) for cell in r] for r in rows]
    names = [name for name, _ in headers]
    widths = [max([len(name)] + [len(r[i]) for r in rows]) for i, name in enumerate(names)]
    flex = names.index(flexible)
    if width is not None:
        room = width - (sum(widths) - widths[flex]) - 2 * (len(names) - 1)  # 2: the padding between columns
        widths[flex] = max(len(flexible), min(widths[flex], room))
        for r in rows:
            if len(r[flex]) > widths[flex]:
                r[flex] = r[flex][: widths[flex] - 1] + "…"
    for (name, justify), w in zip(headers, widths, strict=True):
        table.add_column(name, justify=justify, no_wrap=True, min_width=w)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(*(Text(cell) for cell in r))
    return table


def plain_table(names: list[str], rows: list[list[Any]], **options: Any) -> Table:
    """A table of cells taken as text, control characters escaped; `options`: rich's Table's."""
    table = Table(box=None, pad_edge=False, header_style="bold", **options)
    for name in names:
        table.add_column(name, no_wrap=True)
    for r in rows:
        table.add_row(*(Text(printable(cell)) for cell in r))
    return table


def status_view(status: NodeStatus, now: float | None = None, width: int | None = None) -> RenderableType:
    """`width`: the terminal's; the GPU's name and the command line give way,
    never an id or a header."""
    now = time.time() if now is None else now
    flags = [f for f, on in (("PAUSED", status.paused), ("STOPPING", status.stopping)) if on]
    t = status.totals
    header = Text(
        f"node {printable(status.node)}  policy {printable(status.policy)}  pid {status.pid}  up {status.uptime_s:.0f}s  "
        f"queued {status.queued}  {' '.join(flags)}".rstrip()
    )
    totals = Text(
        f"submitted {t.get('submitted', 0)}  finished {t.get('finished', 0)}  timeout {t.get('timeout', 0)}  "
        f"cancelled {t.get('cancelled', 0)}  failed {t.get('failed', 0)}"
    )
    parts: list[RenderableType] = [header, totals, gpu_table(status, now, width), command_table(status, now, width)]
    if status.record.get("cluster"):
        parts.insert(2, node_table(status.record["cluster"].get("nodes") or [], now))
    foreign = [f"GPU {g.index}: pid {', '.join(map(str, g.foreign_processes))}" for g in status.gpus if g.foreign_processes]
    if foreign:
        parts.append(Text("foreign GPU processes (not started by this runtime): " + "; ".join(foreign)))
    return Group(*parts)


def node_table(rows: list[Any], now: float) -> Table:
    """A cluster gateway's nodes: up or why not, since when, labels, GPUs
    (read as the gateway sent them: what is not of its type reads `-`)."""
    cells = []
    for row in rows:
        if not isinstance(row, dict):
            continue
        state = "up" if row.get("alive") else f"down: {row.get('reason') or NA}"
        found = row.get("labels")
        labels = " ".join(f"{k}={v}" for k, v in sorted(found.items())) if isinstance(found, dict) else ""
        since = row.get("since")
        ago = f"{now - since:.0f}s" if isinstance(since, (int, float)) and not isinstance(since, bool) and since else NA
        cells.append([row.get("name"), state, ago, row.get("gpus", NA), labels or NA])
    return plain_table(["NODE", "STATE", "SINCE", "GPUS", "LABELS"], cells)


def gpu_table(status: NodeStatus, now: float, width: int | None = None) -> Table:
    headers = [
        ("GPU", "left"), ("NAME", "left"), ("RUN", "right"), ("SLOT", "right"), ("QUEUE", "right"),
        ("POOL", "right"), ("REGION", "left"), ("RQ", "right"), ("FRZ", "right"), ("GRANTED", "right"),
        ("ENTER ms", "right"), ("STATE", "left"),
    ]
    rows = []
    nodes = [g.get("node") for g in status.record.get("gpus") or ()]  # a cluster's: which node each is on
    for i, g in enumerate(status.gpus):
        where = f"{nodes[i]}/" if i < len(nodes) and nodes[i] else ""
        name = g.name + (" (sim)" if g.simulated and "simulated" not in g.name else "")
        name += " (AMD)" if g.vendor == "amd" and "AMD" not in g.name else ""
        if g.region_holder is None:
            region = NA
        elif g.region_kind == "lease":
            region = f"lease {now - (g.region_since or now):.0f}s"
        else:
            region = f"t{g.region_holder} {now - (g.region_since or now):.1f}s"
            if g.region_gpus:  # one region over a set of GPUs: the same on each of its rows
                region += f" gpus {','.join(str(i) for i in g.region_gpus)}"
        pool = f"{g.pool.get('idle', 0)}/{g.pool['size']}" if g.pool.get("size") else NA
        enter = f"{g.last_enter_s * 1000:.1f}" if g.last_enter_s is not None else NA
        state = "paused" if g.paused else "leased" if g.leased else "open"
        rows.append([
            where + str(g.index), name, str(len(g.running)), str(g.slots), str(g.queued), pool, region,
            str(g.region_queue), str(len(g.frozen)), str(g.regions_granted), enter, state,
        ])
    return fitted_table(headers, rows, width, "NAME")


def command_table(status: NodeStatus, now: float, width: int | None = None) -> RenderableType:
    if not status.commands:
        return Text("no command queued or running")
    headers = [("ID", "left"), ("STATE", "left"), ("GPU", "right"), ("MODE", "left"),
               ("FOR", "right"), ("LABEL", "left"), ("COMMAND", "left")]
    rows = []
    for c in status.commands:
        since = c.started_at if c.started_at is not None else c.submitted_at
        # The program's name, not its folder: what tells commands apart is what follows it.
        line = shlex.join([os.path.basename(c.argv[0]), *c.argv[1:]]) if c.argv else NA
        if len(line) > COMMAND_WIDTH:
            line = line[: COMMAND_WIDTH - 1] + "…"
        rows.append([
            c.id, c.state, str(c.gpu) if c.gpu is not None else NA, c.mode, f"{max(0.0, now - since):.1f}s",
            c.label or NA, line,
        ])
    return fitted_table(headers, rows, width, "COMMAND")


def trace_view(summary: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = [
        Text(f"trace of {printable(summary['node'])}: policy {printable(summary['policy'])}, {summary['gpus']} GPU(s)"),
        Text(f"{summary['events']} events over {summary['span_s']:.1f} s"),
    ]
    totals = Table(box=None, pad_edge=False, show_header=False)
    totals.add_column(no_wrap=True)
    totals.add_column(justify="right", no_wrap=True)
    for key, value in sorted(summary["totals"].items()):
        totals.add_row(*_cells(key, value))
    parts.append(totals)
    for name in ("queue_wait_s", "run_s"):
        q = summary[name]
        if q:
            parts.append(Text(f"{name:<13} n={q['n']} p50={q['p50']:.3f} p95={q['p95']:.3f} max={q['max']:.3f}"))
    peaks = ", ".join(f"{k}:{v}" for k, v in summary["peak_running_per_gpu"].items()) or NA
    parts.append(Text("peak running per GPU: " + printable(peaks)))
    if summary["unfinished"]:
        parts.append(Text(f"{summary['unfinished']} command(s) started but never finished in this trace"))
    parts.append(region_table(summary))
    leases = summary["leases"]
    hold = leases["hold_s"]
    reasons = printable(", ".join(f"{k} {v}" for k, v in sorted(leases["reasons"].items())) or NA)
    parts.append(Text(
        f"leases: {leases['granted']} granted, hold p50 {_ms(hold.get('p50'))} p99 {_ms(hold.get('p99'))} ms, ended: {reasons}"
    ))
    return Group(*parts)


def region_table(summary: dict[str, Any]) -> RenderableType:
    per_gpu = summary["regions_per_gpu"]
    if not per_gpu:
        return Text("regions: none")
    table = Table(box=None, pad_edge=False, header_style="bold", title="regions", title_justify="left")
    for name in ("GPU", "GRANTED", "ENTER p50 ms", "ENTER p99 ms", "HOLD p50 ms", "HOLD p99 ms", "FLAGGED", "SETTLED (s)",
                 "VERDICTS"):
        table.add_column(name, justify="left" if name in ("GPU", "VERDICTS") else "right", no_wrap=True)
    for gpu, g in per_gpu.items():
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(g["verdicts"].items())) or NA
        table.add_row(*_cells(
            gpu, g["granted"], _ms(g["enter_s"].get("p50")), _ms(g["enter_s"].get("p99")),
            _ms(g["hold_s"].get("p50")), _ms(g["hold_s"].get("p99")), g["flagged"],
            f"{g['settled']} ({g['settle_total_s']:.2f})", verdicts,
        ))
    return table


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.2f}" if seconds is not None else NA


def _cells(*values: Any) -> list[Text]:
    """A table row's cells as text, never markup, control characters escaped."""
    return [Text(printable(v)) for v in values]


def cluster_trace_view(summary: dict[str, Any]) -> RenderableType:
    """A cluster trace: its span, then a row per node (its own summary's main figures)."""
    nodes = summary["nodes"]
    table = Table(box=None, pad_edge=False, header_style="bold", title="nodes", title_justify="left")
    for name in ("NODE", "HOST", "POLICY", "GPUS", "EVENTS", "SPAN s", "FINISHED", "FAILED", "RUN p50 s", "REGIONS", "LEASES"):
        table.add_column(name, justify="left" if name in ("NODE", "HOST", "POLICY") else "right", no_wrap=True)
    for name, s in nodes.items():
        t, run = s["totals"], s["run_s"]
        table.add_row(*_cells(
            name, s.get("host") or NA, s["policy"], s["gpus"], s["events"], f"{s['span_s']:.1f}",
            t.get("finished", 0), sum(t.get(k, 0) for k in ("failed", "timeout", "cancelled")),
            f"{run['p50']:.3f}" if run else NA,
            sum(g["granted"] for g in s["regions_per_gpu"].values()), s["leases"]["granted"],
        ))
    return Group(
        Text(f"cluster trace {printable(summary['directory'])}: {len(nodes)} node(s), {summary['gpus']} GPU(s)"),
        Text(f"{summary['events']} events over {summary['span_s']:.1f} s"),
        table,
    )


def command_view(result: Result, now: float | None = None) -> RenderableType:
    """`krex show`: one command as it is now, a field a line, then its regions."""
    now = time.time() if now is None else now
    how = result.state
    if result.signal:
        how += f" (signal {result.signal})"
    elif result.exit_code is not None:
        how += f" (exit {result.exit_code})"
    # Queued until it started, or (never started) until it ended or now; ran until it ended or now.
    started, ended = result.started_at, result.finished_at
    queued_until = started if started is not None else ended if ended is not None else now
    ran_until = ended if ended is not None else now
    where = ("gpus", ",".join(map(str, result.gpus))) if result.gpus else ("gpu", NA if result.gpu is None else result.gpu)
    lines: list[tuple[str, Any]] = [
        ("id", result.id), ("state", how), ("label", result.label or NA), ("mode", result.mode), where,
        ("command", shlex.join(result.argv) if result.argv else NA),
        ("submitted", _when(result.submitted_at)), ("started", _when(started)), ("ended", _when(ended)),
        ("queue wait", f"{max(0.0, queued_until - result.submitted_at):.1f}s" if result.submitted_at else NA),
        ("run", f"{max(0.0, ran_until - started):.1f}s" if started is not None else NA),
    ]
    lines += [(name, value) for name, value in (("reason", result.reason), ("share", result.share)) if value]
    if isinstance(result.record.get("evaluation"), dict):
        lines.append(("evaluation", evaluation_summary(result.record["evaluation"])))
    fields = Table(box=None, pad_edge=False, show_header=False)
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column()
    for name, value in lines:
        fields.add_row(*_cells(name, value))
    return Group(fields, _regions_of(result))


def evaluation_summary(evaluation: dict[str, Any]) -> str:
    """`krex show`'s evaluation line: outcome, the pair, medians, regions, what failed."""
    parts = [outcome(evaluation), f"{evaluation.get('problem')} / {evaluation.get('candidate')}"]
    ref, cand = evaluation.get("reference_ms"), evaluation.get("candidate_ms")
    if isinstance(ref, (int, float)) and isinstance(cand, (int, float)):
        parts.append(f"reference {ref:.4g} ms, candidate {cand:.4g} ms")
    regions = [str(r) for r in evaluation.get("regions") or [] if r is not None]
    if regions:
        parts.append("regions " + ",".join(regions))
    if evaluation.get("message"):
        parts.append(str(evaluation["message"]))
    return printable("; ".join(str(p) for p in parts))


def _regions_of(result: Result) -> RenderableType:
    """Its regions, one row per GPU of each, with the certificate's verdict."""
    if not result.regions:
        return Text(f"regions: {result.region_count or 'none'}")
    verdicts: dict[str, int] = {}
    for r in result.regions:
        verdicts[r.verdict or "n/a"] = verdicts.get(r.verdict or "n/a", 0) + 1
    kept = "" if result.region_count <= len(result.regions) else f" (the first {len(result.regions)} kept)"
    title = (f"regions: {result.region_count}{kept}; "
             + ", ".join(f"{printable(k)} {v}" for k, v in sorted(verdicts.items())))
    rows = [[r.region, r.gpu, r.kind, r.verdict or NA, _ms(r.wait_s), _ms(r.enter_s), _ms(r.hold_s), r.reason or NA]
            for r in result.regions]
    return plain_table(["REGION", "GPU", "KIND", "VERDICT", "WAIT ms", "ENTER ms", "HOLD ms", "ENDED"], rows,
                       title=Text(title), title_justify="left")


def _when(t: float | None) -> str:
    if not t:
        return NA
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 10)}"
