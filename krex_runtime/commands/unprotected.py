"""Unprotected timings of a command: CUDA-event elapsed times that no single
region of its tenant covered, counted by the interception library
(native/src/intercept/intercept_events.c) under policy krex.

The runtime makes a report per command (commands/tenant_reports.py: a pipe it
reads as it goes) and names it in KREX_UNPROTECTED_TIMINGS; the library
writes one byte per unprotected timing, so the bytes it got are the count
(every process of the command, a pooled command's context process included,
writes to the command's own report; a command killed by a signal has counted
what it did). The result and the trace's command_finished carry the count.
"""

from __future__ import annotations

from krex_runtime.commands.job import Job
from krex_runtime.commands.tenant_reports import Reports
from krex_runtime.tenant import env as names


def setup(job: Job, reports: Reports) -> None:
    """Give a just-submitted command its count report, made as it starts
    (policy krex only: outside it nothing tells a region from no region)."""
    path = reports.path(f"{job.id}.unprotected")
    job.env[names.UNPROTECTED_TIMINGS] = str(path)
    job.unprotected_path = path
