"""Unprotected timings of a command: CUDA-event elapsed times that no single
region of its tenant covered, counted by the interception library
(native/src/intercept/intercept_events.c) under policy krex.

The runtime makes an empty file per command in the output folder and names
it in KREX_UNPROTECTED_TIMINGS; the library appends one byte per unprotected
timing, so the file's size is the count (every process of the command, a
pooled command's context process included, writes to the command's own
file; a command killed by a signal has counted what it did). The result and
the trace's command_finished carry the count.
"""

from __future__ import annotations

import os
from pathlib import Path

from krex_runtime.commands.job import Job
from krex_runtime.node.access import RunAs
from krex_runtime.tenant import env as names


def setup(job: Job, output_dir: Path, run_as: RunAs | None) -> None:
    """Give a just-submitted command its count file (policy krex only: outside
    it nothing tells a region from no region)."""
    path = output_dir / f"{job.id}.unprotected"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        if run_as is not None and run_as.user is not None:
            os.fchown(fd, run_as.user.uid, run_as.user.gid)
    finally:
        os.close(fd)
    job.env[names.UNPROTECTED_TIMINGS] = str(path)
    job.unprotected_path = path


def count(job: Job) -> int:
    if job.unprotected_path is None:
        return 0
    try:
        return job.unprotected_path.stat().st_size
    except OSError:
        return 0
