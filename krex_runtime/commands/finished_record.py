"""The finished-commands record: what lets a restarted runtime still answer
`wait` for the commands an earlier run of it ended.

A command lives in the dispatcher's memory, so a runtime that restarts once
answered `not_found` for a command its previous run had cancelled. Each run
now appends to `<run_dir>/finished.jsonl` one line when a command is queued
(its id and what the submit said) and one when it ends (its result record,
regions included); at start the runtime reads the record back and its
dispatcher keeps those commands, as finished ones, in its history:

- a command whose end is recorded is answered with that result (and, with
  `attach`, the output files it names, while they exist);
- a command queued or running when its runtime died (SIGKILL, a crash: no
  end recorded; the watchdog ended its processes) is answered `cancelled`,
  with the reason RESTART_REASON.

A recorded result holds no regions (`region_count` says how many; the trace
has them), so a line stays under a few KB. The record is bounded as the
history is: it keeps (in memory too, as lines) the last
`dispatcher.keep_finished` ended commands and those not ended yet, and is
rewritten with just those whenever the file has grown to twice that. A
line that does not parse is skipped, so a torn last line (a crash in
mid-write) costs that one command. Writes that fail (a full disk) are
logged once and never stop the runtime.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.commands.job import Job
from krex_runtime.commands.launch import Outcome

log = logging.getLogger("krex.runtime")

RECORD_FILE = "finished.jsonl"
RESTART_REASON = "ended by a restart: the runtime running it stopped without recording its end"


@dataclass
class PastJob(Job):
    """A command an earlier run ended: its result as that run recorded it."""

    record: dict[str, Any] = field(default_factory=dict)

    def result(self) -> dict[str, Any]:
        return dict(self.record)


class FinishedRecord:
    def __init__(self, path: Path, keep: int, output_dir: Path) -> None:
        self.path = path
        self.keep = keep
        self._output_dir = output_dir
        self._fd = -1
        # What the file holds, line by line, as this run left it: commands not
        # ended yet (in the order queued) and ended ones (in the order ended).
        self._open: dict[str, bytes] = {}
        self._ended: dict[str, bytes] = {}
        self._lines = 0  # lines in the file, to know when to rewrite it
        self._failing = False

    # --- reading, at start ---------------------------------------------------

    def load(self) -> list[Job]:
        """The commands earlier runs ended, oldest end first: the last `keep`
        whose end is recorded, then those whose end never was (now ended by
        this restart). The file is rewritten with just those, their ends, and
        kept open for this run's lines."""
        lost: list[str] = []
        entries: dict[str, dict[str, Any]] = {}
        for command_id, entry, line in self._read():
            if isinstance(entry.get("result"), dict):
                self._open.pop(command_id, None)
                self._ended.pop(command_id, None)
                self._ended[command_id] = line
                entries[command_id] = entry
            elif command_id not in self._ended:
                self._open[command_id] = line
                entries[command_id] = entry
        for command_id in list(self._open):  # queued or running when their runtime died
            queued = entries[command_id].get("queued")
            entries[command_id] = {"id": command_id, "result": self._lost(command_id, queued if isinstance(queued, dict) else {})}
            self._ended[command_id] = _line(entries[command_id])
            lost.append(command_id)
        self._open.clear()
        self._trim()
        if lost:
            log.warning("%d command(s) of an earlier run never ended there (its runtime died): they are "
                        "answered cancelled (%s...)", len(lost), lost[0])
        self._rewrite()
        return [self._job(entries[command_id]) for command_id in self._ended]

    def _read(self) -> Iterator[tuple[str, dict[str, Any], bytes]]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (its `with` follows: a missing record is told from an unreadable one)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.error("cannot read the finished-commands record %s (%s): commands of earlier runs are unknown",
                      self.path, exc.strerror or exc)
            return
        skipped = 0
        with f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = None
                if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"] and line.endswith(b"\n"):
                    yield entry["id"], entry, line
                else:
                    skipped += 1
        if skipped:
            log.warning("the finished-commands record %s: %d line(s) that do not parse were skipped", self.path, skipped)

    def _job(self, entry: dict[str, Any]) -> Job:
        command_id, result, uid = entry["id"], entry["result"], entry.get("submitter_uid")
        job = PastJob(
            id=command_id, argv=[], gpu_request=None, timeout_s=0.0, cwd="", env={}, label=str(result.get("label") or ""),
            submitted_at=_number(result.get("submitted_at")), state=str(result.get("state") or "cancelled"),
            stdout_path=_path(result.get("stdout_path")), stderr_path=_path(result.get("stderr_path")),
            submitter_uid=uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
            record=result | {"id": command_id},
        )
        job.done.set()
        return job

    def _lost(self, command_id: str, queued: dict[str, Any]) -> dict[str, Any]:
        """The result of a command whose end no run recorded."""
        job = Job(
            id=command_id, argv=[], gpu_request=None, timeout_s=0.0, cwd="", env={},
            label=str(queued.get("label") or ""), submitted_at=_number(queued.get("submitted_at")), state="cancelled",
            outcome=Outcome("cancelled", None, None, RESTART_REASON), lease=bool(queued.get("lease")),
            mode=str(queued.get("mode") or "process"), share=str(queued.get("share") or ""),
        )
        job.gpu = queued.get("gpu") if isinstance(queued.get("gpu"), int) else None
        for stream in ("stdout", "stderr"):  # what it wrote before its runtime died
            path = self._output_dir / f"{command_id}.{stream}"
            if path.exists():
                setattr(job, f"{stream}_path", path)
        return job.result() | {"region_count": 0}

    # --- writing, as this run goes -------------------------------------------

    def queued(self, job: Job) -> None:
        line = _line({"id": job.id, "queued": {"submitted_at": job.submitted_at, "label": job.label,
                                               "gpu": job.gpu_request, "mode": job.mode, "share": job.share,
                                               "lease": job.lease}})
        self._open[job.id] = line
        self._append(line)

    def finished(self, job: Job, result: dict[str, Any]) -> None:
        """Its result record, less its regions (the trace has them: a record of
        64 regions would make each line tens of KB); `region_count` stays."""
        line = _line({"id": job.id, "submitter_uid": job.submitter_uid,
                      "result": {k: v for k, v in result.items() if k != "regions"}})
        self._open.pop(job.id, None)
        self._ended.pop(job.id, None)
        self._ended[job.id] = line
        self._trim()
        self._append(line)
        if self._lines > 2 * (len(self._open) + len(self._ended)) + 1000:
            self._rewrite()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _trim(self) -> None:
        while len(self._ended) > self.keep:
            del self._ended[next(iter(self._ended))]

    def _append(self, line: bytes) -> None:
        if self._fd < 0:
            return
        try:
            os.write(self._fd, line)  # one write to an O_APPEND file: the line is whole or absent
        except OSError as exc:
            if not self._failing:
                log.error("cannot write the finished-commands record %s (%s): a restart will not know "
                          "the commands that end meanwhile", self.path, exc.strerror or exc)
            self._failing = True
            return
        self._failing = False
        self._lines += 1

    def _rewrite(self) -> None:
        """The file with just what is kept (by a rename, so it is whole
        whatever happens), open for appending."""
        temporary = self.path.with_name(self.path.name + ".new")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
            try:
                view = memoryview(b"".join([*self._open.values(), *self._ended.values()]))
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except OSError as exc:
            log.error("cannot rewrite the finished-commands record %s (%s)", self.path, exc.strerror or exc)
            temporary.unlink(missing_ok=True)
            if self._fd < 0:
                self._open_for_append()
            return
        self.close()
        self._open_for_append()
        self._lines = len(self._open) + len(self._ended)

    def _open_for_append(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            log.error("cannot write the finished-commands record %s (%s): a restart will not know this run's "
                      "commands", self.path, exc.strerror or exc)


Observer = Callable[[dict[str, Any]], None]


def observer(record: FinishedRecord, job_of: Callable[[str], Job | None],
             result_of: Callable[[Job], dict[str, Any]]) -> Observer:
    """An event-log observer that records each command as it is queued and
    as it ends (the runtime's own commands, its canaries, left out)."""

    def observe(event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind not in ("command_queued", "command_finished"):
            return
        job = job_of(event.get("id", ""))
        if job is None or job.internal or isinstance(job, PastJob):
            return
        if kind == "command_queued":
            record.queued(job)
        else:
            record.finished(job, result_of(job))

    return observe


def _line(entry: dict[str, Any]) -> bytes:
    return (json.dumps(entry, separators=(",", ":"), default=str) + "\n").encode()


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _path(value: Any) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None
