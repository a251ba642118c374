"""The reply bodies `krex` prints, one frozen dataclass per shape (the verb
table names each verb's: `Verb.reply`). A client reads a reply through its
shape before showing it, so a reply of the wrong shape is a malformed
message, said in one line, never a KeyError or TypeError deep in a view.
Keys a shape lacks are ignored (a newer runtime may send more); a field an
older runtime did not send reads as its default.

docs/protocol.md's request table says what each reply holds; these are the
parts a client relies on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CommandStateReply:
    """`submit` and `cancel`: the command and its state after the request."""

    id: str
    state: str


@dataclass(frozen=True)
class ListedCommand:
    """One row of `ls` (wire/protocol/history.py, `row`)."""

    id: str
    state: str | None = None
    label: str = ""
    user: str = ""
    share: str = ""
    gpu: int | None = None
    mode: str | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    argv: list[str] = field(default_factory=list)
    node: str | None = None  # a cluster gateway's rows: the node it ran on
    evaluation: dict[str, Any] | None = None  # what its KREX-EVAL-RESULT line said (wire/evaluation_record.py)


@dataclass(frozen=True)
class ListReply:
    commands: list[ListedCommand]


@dataclass(frozen=True)
class OutputPart:
    """One stream's part of a `logs` reply."""

    data: str
    next: int
    more: bool = False


@dataclass(frozen=True)
class LogsReply:
    id: str
    state: str
    ended: bool
    output: dict[str, OutputPart] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PausedReply:
    paused: int | str  # a GPU's index, or "node"


@dataclass(frozen=True)
class ResumedReply:
    resumed: int | str


@dataclass(frozen=True)
class LeaseReply:
    gpu: int
    expires_at: float
    region: int | None = None
    ttl_s: float | None = None


@dataclass(frozen=True)
class ReleaseReply:
    gpu: int


@dataclass(frozen=True)
class RecycleReply:
    gpu: int
    now: bool
    workers: int
