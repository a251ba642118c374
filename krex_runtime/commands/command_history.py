"""The commands a dispatcher knows, by id: those queued and running, and the
finished ones it keeps answering for (`wait`, `attach`, `history`), earlier
runs' included.

A finished command is kept until `dispatcher.keep_finished` newer ones have
ended; then it leaves, and its output files with it, so the output folder
(often on a RAM-backed /run) stays bounded however many commands a node runs.
"""

from __future__ import annotations

import logging
from collections import deque

from krex_runtime.commands.job import Job
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError

log = logging.getLogger("krex.dispatcher")


class CommandHistory:
    def __init__(self, keep_finished: int) -> None:
        self.jobs: dict[str, Job] = {}
        self._keep = keep_finished
        self._finished: deque[str] = deque()  # ids, oldest first

    def find(self, command_id: str) -> Job:
        job = self.jobs.get(command_id)
        if job is None:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no command {command_id!r} (unknown, or finished long ago)")
        return job

    def remember(self, past: list[Job]) -> None:
        """Commands earlier runs ended, oldest first, put before this run's."""
        for job in past:
            if job.id not in self.jobs:
                self.jobs[job.id] = job
                self._finished.append(job.id)
        self._forget_oldest()

    def ended(self, job: Job) -> None:
        self._finished.append(job.id)
        self._forget_oldest()

    def _forget_oldest(self) -> None:
        while len(self._finished) > self._keep:
            forgotten = self.jobs.pop(self._finished.popleft(), None)
            if forgotten is not None:
                _remove_output(forgotten)


def _remove_output(job: Job) -> None:
    """A command that left the history can no longer be waited on or attached
    to: its output files go with it."""
    for path in (job.stdout_path, job.stderr_path):
        if path is not None:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot remove %s: %s", path, exc.strerror)
