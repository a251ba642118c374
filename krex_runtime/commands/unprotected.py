"""Unprotected timings of a command: CUDA-event elapsed times that no single
region of its tenant covered, counted by the interception library
(native/src/intercept/intercept_events.c) under policy krex.

The runtime makes an empty file per command (commands/tenant_reports.py) and names
it in KREX_UNPROTECTED_TIMINGS; the library appends one byte per unprotected
timing, so the file's size is the count (every process of the command, a
pooled command's context process included, writes to the command's own
file; a command killed by a signal has counted what it did). The result and
the trace's command_finished carry the count.
"""

from __future__ import annotations

from pathlib import Path

from krex_runtime.commands import tenant_reports
from krex_runtime.commands.job import Job
from krex_runtime.node.access import RunAs
from krex_runtime.tenant import env as names


def setup(job: Job, run_dir: Path, run_as: RunAs | None) -> None:
    """Give a just-submitted command its count file (policy krex only: outside
    it nothing tells a region from no region)."""
    path = tenant_reports.report_file(run_dir, run_as, f"{job.id}.unprotected")
    job.env[names.UNPROTECTED_TIMINGS] = str(path)
    job.unprotected_path = path


def count(job: Job) -> int:
    if job.unprotected_path is None:
        return 0
    try:
        return job.unprotected_path.stat().st_size
    except OSError:
        return 0
