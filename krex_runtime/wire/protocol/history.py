"""What `ls` and `logs` share between a runtime, a cluster gateway and the
CLI: the row a listed command has, the filters, the times `--since` and
`--until` take, and the table `krex ls` prints."""

from __future__ import annotations

import fnmatch
import re
import time
from datetime import datetime
from typing import Any

from krex_runtime.wire.evaluation_record import outcome
from krex_runtime.wire.printable import printable
from krex_runtime.wire.state.command_states import ended_state

FINAL_STATES = ("finished", "failed", "cancelled", "timeout")
STATE_GROUPS = {"active": ("queued", "running"), "ended": FINAL_STATES}
STATES = ("queued", "running", *FINAL_STATES)
STREAMS = ("stdout", "stderr")
# A reply carries at most this much of one stream; `logs` asks again for the rest.
LOGS_CHUNK_BYTES = 1 << 20
_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_NOW = re.compile(r"now(?:\s*-\s*(\d+(?:\.\d+)?\s*[smhd]))?", re.I)
_DAYS = {"today": 0, "yesterday": 1}


def parse_when(text: str) -> float:
    """A point in time as `--since`/`--until` take it: an age ("30s", "10m",
    "2h", "1d", "now-1h": that long ago; "now"), "today" or "yesterday" (its
    start, local time), unix seconds, or an ISO date and time in local time
    ("2026-12-03T14:00", "14:00" for today)."""
    text = text.strip()
    now = _NOW.fullmatch(text)
    if now:  # "now", "now-1h": as `date -d` and Grafana write it
        text = now.group(1) or "0s"
    day = _DAYS.get(text.lower())
    if day is not None:  # the start of today or yesterday, local time
        return datetime.combine(datetime.now().date(), datetime.min.time()).timestamp() - day * 86400
    ago = _AGO.fullmatch(text)
    if ago:
        return time.time() - float(ago.group(1)) * _UNIT_S[ago.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", text):
            clock = datetime.strptime(text if text.count(":") == 2 else text + ":00", "%H:%M:%S").time()
            return datetime.combine(datetime.now().date(), clock).timestamp()
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give an age (30s, 10m, 2h, 1d, now-1h), today, yesterday, unix seconds or "
                         "an ISO time (2026-12-03T14:00, or 14:00 for today)") from None


def states_of(text: str | None) -> set[str] | None:
    """`--state`: one state, several "a,b", or a group (active, ended)."""
    if not text:
        return None
    found: set[str] = set()
    for word in (w.strip() for w in text.split(",") if w.strip()):
        if word in STATE_GROUPS:
            found.update(STATE_GROUPS[word])
        elif word in STATES:
            found.add(word)
        else:
            raise ValueError(f"no state {word!r}: the states are {', '.join(STATES)}, or active, ended")
    return found


def row(record: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """One listed command, from its result record (a running one's so far)."""
    share = record.get("share") or ""
    return {
        "id": record["id"], "state": _ended(record), "label": record.get("label") or "",
        "user": share.split("/", 1)[0], "share": share, "gpu": record.get("gpu"), "mode": record.get("mode"),
        "submitted_at": record.get("submitted_at"), "started_at": record.get("started_at"),
        "finished_at": record.get("finished_at"), "exit_code": record.get("exit_code"),
        "signal": record.get("signal"), "reason": record.get("reason") or "", "argv": list(argv),
        **({"evaluation": record["evaluation"]} if isinstance(record.get("evaluation"), dict) else {}),
    }


def _ended(record: dict[str, Any]) -> str | None:
    """Its state, `failed` for an exit other than 0 whatever runtime recorded it (command_states.py)."""
    state = record.get("state")
    return ended_state(state, record.get("exit_code"), record.get("signal")) if isinstance(state, str) else state


def matches(listed: dict[str, Any], body: Any) -> bool:
    """Whether a listed row passes every filter of an `ls` body."""
    states = states_of(body.state)
    if states is not None and listed["state"] not in states:
        return False
    if body.label is not None and not fnmatch.fnmatchcase(listed["label"], body.label):
        return False
    submitted = listed["submitted_at"] or 0.0
    if body.since is not None and submitted < body.since:
        return False
    if body.until is not None and submitted > body.until:
        return False
    return body.user is None or listed["user"] == body.user


def listed_table(reply: dict[str, Any]) -> str:
    """`krex ls`: one line per command, oldest first; ids whole (they go into
    `krex logs` and `krex cancel`)."""
    rows = reply["commands"]
    if not rows:
        return "no commands match"
    head = ("ID", "STATE", "EXIT", "GPU", "USER", "LABEL", "SUBMITTED", "WAIT", "RUN", "COMMAND")
    lines = [head] + [_cells(r) for r in rows]
    if any(isinstance(r.get("evaluation"), dict) for r in rows):  # evaluations: their outcome after the exit
        lines = [(*line[:3], "EVAL" if i == 0 else _outcome(rows[i - 1]), *line[3:]) for i, line in enumerate(lines)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)) + "  " + line[-1] for line in lines).rstrip()


def _outcome(r: dict[str, Any]) -> str:
    evaluation = r.get("evaluation")
    return printable(outcome(evaluation))[:20] if isinstance(evaluation, dict) else "-"


def _cells(r: dict[str, Any]) -> tuple[str, ...]:
    exit_ = "" if r["exit_code"] is None else str(r["exit_code"])
    if r["signal"]:
        exit_ = f"sig {r['signal']}"
    submitted = time.strftime("%m-%d %H:%M:%S", time.localtime(r["submitted_at"])) if r["submitted_at"] else "-"
    started, finished = r["started_at"], r["finished_at"]
    run = f"{(finished if finished is not None else time.time()) - started:.1f}s" if started is not None else "-"
    # How long it queued: until it started, or (never started) until it ended or now.
    queued_until = started if started is not None else finished if finished is not None else time.time()
    wait = f"{queued_until - r['submitted_at']:.1f}s" if r["submitted_at"] else "-"
    gpu = "-" if r["gpu"] is None else str(r["gpu"])
    share = r["share"] if r["share"] and r["share"] != r["user"] else r["user"]
    # What submitters chose (ids from another runtime too) is shown, never acted on by the terminal.
    cells = (r["id"], r["state"] or "", exit_, gpu, share or "-", r["label"] or "-", submitted, wait, run, " ".join(r["argv"]))
    return tuple(printable(c) for c in cells)
