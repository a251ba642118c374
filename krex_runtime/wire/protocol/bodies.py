"""The body of each control request: one frozen dataclass per shape
(docs/protocol.md). A body that does not fit is refused with `bad_request`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

# How a command runs (README, "Modes"): its own process tree; forked from its
# GPU's preloaded zygote; a Python entry point in a warm context process; its
# own process tree with its driver calls executed by a warm context server.
Mode = Literal["process", "forked", "pooled", "forwarded"]
MODES: tuple[str, ...] = get_args(Mode)

@dataclass(frozen=True)
class HelloBody:
    client: str = ""


@dataclass(frozen=True)
class EmptyBody:
    pass


@dataclass(frozen=True)
class SubmitBody:
    argv: list[str]
    gpu: int | None = None
    # Placed on a set of GPUs (docs/regions.md, "Regions over several GPUs"):
    # these indices, or any `gpu_count` GPUs (0 or 1: one GPU, as `gpu` says).
    gpus: list[int] = field(default_factory=list)
    gpu_count: int = 0
    timeout_s: float | None = None
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""
    attach: bool = False  # stream output and the result to this client
    lease: bool = False  # run with the whole GPU leased to it (policy krex)
    mode: Mode | None = None  # None: the runtime's dispatcher.default_mode
    auto_region: bool | None = None  # timing harnesses in regions; None: the config's regions.auto_region
    auto_region_entries: list[str] = field(default_factory=list)  # more entry points, "module:function"
    share: str = ""  # fair-share key within the submitter's share; "": the submitter's own
    # What a node must have to run it (a cluster gateway places by these; one
    # runtime refuses a command its labels or GPUs do not meet).
    node_labels: dict[str, str] = field(default_factory=dict)  # runtime.labels the node must carry
    gpu_model: str = ""  # a GPU whose name contains this (case-insensitive); "": any
    # Re-runs on another node when the node running it is lost (a cluster
    # gateway's; one runtime has no other node and keeps it unused).
    retries: int = 0


def submit_modes() -> tuple[str, ...]:
    """The modes a submission may name (`krex run --mode` offers these)."""
    return MODES


@dataclass(frozen=True)
class CommandRef:
    id: str


@dataclass(frozen=True)
class WaitBody:
    id: str
    attach: bool = True  # replay output so far, then stream the rest


# `node` on operator verbs: which node of a cluster the verb is for. A
# cluster gateway needs it; one runtime treats None as itself and answers
# any other name than its own `not_found`.


@dataclass(frozen=True)
class LeaseBody:
    gpu: int
    ttl_s: float | None = None
    node: str | None = None


@dataclass(frozen=True)
class GpuRef:
    gpu: int
    node: str | None = None


@dataclass(frozen=True)
class RecycleBody:
    gpu: int
    now: bool = False  # kill busy context processes at once (their commands fail)
    node: str | None = None


@dataclass(frozen=True)
class PauseBody:
    gpu: int | None = None  # None: the whole node
    node: str | None = None


@dataclass(frozen=True)
class SnapshotBody:
    node: str | None = None


@dataclass(frozen=True)
class ListBody:
    """`ls`: the commands the runtime remembers (queued, running, and the last
    dispatcher.keep_finished ended ones), those that match every filter given."""

    state: str | None = None  # one state, or several "a,b"; "active" is queued,running; "ended" the final ones
    label: str | None = None  # a label, or a glob of one ("bench-*")
    since: float | None = None  # submitted at or after (unix time)
    until: float | None = None  # submitted at or before (unix time)
    user: str | None = None  # submitted by this user (the submitter part of its share key)


@dataclass(frozen=True)
class LogsBody:
    """`logs`: a command's output from its files, from `offsets` (bytes
    already read, per stream) on, or its last `tail` lines."""

    id: str
    streams: list[str] = field(default_factory=lambda: ["stdout", "stderr"])
    tail: int | None = None
    offsets: dict[str, int] = field(default_factory=dict)
