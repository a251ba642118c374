"""The runtime's side of auto-regions (tenant/auto_region.py wraps the timing
harnesses inside the tenant): which commands get them, and what each one's
tenant reports it wrapped.

A command gets auto-regions when its submit says `auto_region: true`, or
says nothing and the config's `regions.auto_region` is on; its entry points
are the built-in ones, the config's `regions.auto_region_entries` and the
submit's own. All of it travels in the command's environment (tenant/env.py),
so every way of starting a tenant (a process, a pooled or forked context)
gets it from the one environment builder. The tenant lists what it wrapped,
a line each, in a report made for the command (commands/tenant_reports.py);
the result and the trace's command_finished carry the list.
"""

from __future__ import annotations

from pathlib import Path

from krex_runtime.commands.job import Job
from krex_runtime.commands.tenant_reports import Report, Reports
from krex_runtime.node.config import RegionSection, auto_region_entry_problem
from krex_runtime.tenant import env as names
from krex_runtime.wire.protocol.bodies import SubmitBody
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError


def check(body: SubmitBody) -> None:
    """A bad_request for entry points that name none."""
    problem = auto_region_entry_problem(body.auto_region_entries)
    if problem is not None:
        raise ProtocolError(ErrorCode.BAD_REQUEST, problem)


def command_env(body: SubmitBody, regions: RegionSection, report: Path) -> dict[str, str]:
    """The command's environment: the submitted one, with auto-regions set or cleared."""
    ours = (names.AUTO_REGION, names.AUTO_REGION_REPORT, names.AUTO_REGION_ENTRIES)
    env = {k: v for k, v in body.env.items() if k not in ours}
    on = regions.auto_region if body.auto_region is None else body.auto_region
    if not on:
        return env
    env[names.AUTO_REGION] = "1"
    env[names.AUTO_REGION_REPORT] = str(report)
    entries = [*regions.auto_region_entries, *body.auto_region_entries]
    if entries:
        env[names.AUTO_REGION_ENTRIES] = ",".join(entries)
    return env


def setup(job: Job, body: SubmitBody, regions: RegionSection, reports: Reports) -> None:
    """Give a just-submitted command its environment and, with auto-regions, its
    report (made as it starts)."""
    path = reports.path(f"{job.id}.auto-regions")
    job.env = command_env(body, regions, path)
    if job.env.get(names.AUTO_REGION) == "1":
        job.auto_region_report = path


def wrapped(report: Report) -> list[str]:
    """What the tenant reported it wrapped, each name once, in the order it did
    so (of a report longer than the runtime keeps, the whole lines kept)."""
    data = report.kept
    if report.size > len(data):
        data = data[: data.rfind(b"\n") + 1]
    seen: dict[str, None] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            seen.setdefault(line.strip()[:200], None)
    return list(seen)
