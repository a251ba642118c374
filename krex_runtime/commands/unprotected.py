"""Unprotected timings of a command: CUDA-event elapsed times that no single
region of its tenant covered, counted by the interception library
(native/src/intercept/intercept_events.c) under policy krex; and untracked
ones, whose events the library could not track (a process holding more live
events than its table has room for): known neither way, counted apart.

The runtime makes a report per command (commands/tenant_reports.py: a pipe it
reads as it goes) and names it in KREX_UNPROTECTED_TIMINGS; the library
writes one byte per timing, `t` for an untracked one and `u` for an
unprotected one, so the bytes it got are the counts (every byte other than
`t` counts unprotected: libraries before untracked timings wrote `u` only).
Every process of the command, a pooled command's context process included,
writes to the command's own report; a command killed by a signal has counted
what it did. The result and the trace's command_finished carry the counts.
"""

from __future__ import annotations

from krex_runtime.commands.job import Job
from krex_runtime.commands.tenant_reports import Report, Reports
from krex_runtime.tenant import env as names

UNTRACKED = b"t"  # the library's byte for an untracked timing


def setup(job: Job, reports: Reports) -> None:
    """Give a just-submitted command its count report, made as it starts
    (policy krex only: outside it nothing tells a region from no region)."""
    path = reports.path(f"{job.id}.unprotected")
    job.env[names.UNPROTECTED_TIMINGS] = str(path)
    job.unprotected_path = path


def counted(job: Job, report: Report) -> None:
    """As the command ends: its counts, from all its report got."""
    job.unprotected_timings = report.size - report.tallied
    job.untracked_timings = report.tallied
