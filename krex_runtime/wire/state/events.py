"""Every event the runtime emits, one frozen dataclass per type.

An emitter builds the dataclass (`emit(events.CommandQueued(id=..., ...))`); the
runtime turns it into its wire dict (`to_wire`), adds `seq` and `t`, folds it
(wire/state/reducer.py), traces and publishes it. `EVENTS` maps each wire type name to
its class (the registry's machinery is wire/state/event_base.py); wire/state/event_check.py
derives from the classes what a trace's events must hold, and docs/trace-format.md's table is printed from them (`python -m
krex_runtime.wire.state.events --markdown`; a test keeps the two the same). Field order
is the order of the keys on the wire; a new event type or field bumps the trace
format version.
"""

import sys
from dataclasses import dataclass
from typing import Any

# The registry's machinery, re-exported: emitters and readers use `events.X`.
from krex_runtime.wire.state.event_base import EVENTS, Event, event, markdown_table, note, to_wire, unread

__all__ = ["EVENTS", "Event", "event", "markdown_table", "note", "to_wire", "unread"]

DEFAULT_KEEP_FINISHED = 1000  # finished commands a state remembers unless runtime_started says


# --- the runtime starts -------------------------------------------------------------


@event("runtime_started")
class RuntimeStarted(Event):
    """the service is up"""
    node: str
    policy: str
    pid: int
    keep_finished: int = DEFAULT_KEEP_FINISHED
    gpus: list[dict[str, Any]] = note("as in the header, with `pool_size`")
    cgroups: str | None = unread("slice path or null", None)
    regions: dict[str, Any] | None = unread("gate backend, freezer, reserved and tenant cores; null without regions",
                                            None)
    recovered: list[str] = unread("what a previous run left (closed gates, frozen tenants) and this start undid",
                                  factory=list)


# --- commands -----------------------------------------------------------------------


@event("command_queued")
class CommandQueued(Event):
    """admitted to the queue (fair share across share keys, FIFO within one)"""
    id: str
    argv: list[str]
    gpu: int | None = note("requested index or null", None)
    timeout_s: float | None = None
    label: str = ""
    lease: bool = unread("", False)
    mode: str | None = note("`process`, `forked` or `pooled`; absent for the runtime's own commands", None,
                            omit_none=True)
    share: str | None = unread(
        "effective fair-share key: the submitter (its user; `key:NAME` over tcp), then `/` and its `--share` key if "
        "it gave one; absent for the runtime's own commands", None, omit_none=True)
    gpus: list[int] | None = note("a set of GPUs asked for by index (`--gpus 0,1`); absent otherwise", None,
                                  omit_none=True)
    gpu_count: int | None = note("how many GPUs it asked for (`--gpus 2`, or the size of `gpus`); absent: one",
                                 None, omit_none=True)


@event("command_started")
class CommandStarted(Event):
    """its process started on `gpu` (pooled: a context process took it)"""
    id: str
    gpu: int
    pid: int | None
    tenant_id: int | None
    worker: str | None = note("pooled only: the context process's id; `pid` and `tenant_id` are then its", None,
                              omit_none=True)
    gpus: list[int] | None = note("placed on a set of GPUs: the set (ascending; `gpu` is its first); absent on one "
                                  "GPU", None, omit_none=True)


@event("command_finished")
class CommandFinished(Event):
    """it ended (also for commands cancelled while queued)"""
    id: str
    state: str = note("`finished`, `timeout`, `cancelled`, `failed`")
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    gpu: int | None = unread("", None)
    auto_regions: list[str] = note("entry points its tenant ran in regions (auto-regions)", factory=list)
    unprotected_timings: int = note("CUDA-event timings no single region of its tenant covered (policy krex)", 0)
    untracked_timings: int = note("CUDA-event timings with an event the interception library could not track (tens "
                                  "of thousands live): known neither protected nor unprotected (policy krex; absent "
                                  "from older traces)", 0)
    output_lost: dict[str, int] | None = unread("bytes of `stdout` and `stderr` its output files did not get (a full "
                                                "disk; attached clients got them); absent when none", None, omit_none=True)
    evaluation: dict[str, Any] | None = note("the evaluation its last stdout line reported (`KREX-EVAL-RESULT`, "
                                             "docs/protocol.md, \"Evaluations\"); absent when none", None,
                                             omit_none=True)


@dataclass(frozen=True, kw_only=True)
class AdmissionEvent(Event):
    """Base of pause and resume: where admission changed."""

    gpu: int | None = note("index, or null for the node", None)


@event("admission_paused")
class AdmissionPaused(AdmissionEvent):
    """`krex pause`"""


@event("admission_resumed")
class AdmissionResumed(AdmissionEvent):
    """`krex resume`"""


# --- regions ------------------------------------------------------------------------


@event("region_requested")
class RegionRequested(Event):
    """a tenant asked for its GPU alone (leases queue ahead of regions)"""
    gpu: int
    region: int = note("request number, node-wide")
    kind: str = note("`region` or `lease`")
    tenant_id: int | None = note("0: an operator's lease")
    command_id: str = unread()
    gpus: list[int] | None = note("a region over a set of GPUs: the set (ascending); it has a row per GPU, each "
                                  "with this one region id; absent on one GPU", None, omit_none=True)


@event("region_granted")
class RegionGranted(Event):
    """the holder may measure"""
    gpu: int
    region: int
    kind: str
    tenant_id: int | None
    command_id: str = ""
    frozen: list[int] = note("tenant ids", factory=list)
    drain: dict[str, str] = unread("pid -> ok / timed_out / error / no_ack / exited / stopped")
    wait_s: float = unread("seconds queued; the entry's steps follow")
    gap_s: float = unread("seconds of it the gate stayed open for the work the previous region held back "
                        "(`regions.gap_s`)", 0.0)
    host_side_s: float = unread("seconds, before the close, other tenants' context creations and module loads in "
                                "progress were let finish, new ones parked (`regions.host_side_wait_s`; absent "
                                "before version 5)", 0.0)
    host_side_left: int = unread("processes still inside one at that bound: their calls overlap the region", 0)
    close_s: float = unread()
    quiesce_s: float = unread()
    inside_at_close: dict[str, int] = unread("call class -> the other tenants' threads inside a gated call at the close",
                                             factory=dict)
    waited_for: dict[str, int] = unread("the part of inside_at_close that quiesce waited for", factory=dict)
    drain_s: float = unread()
    deferred: dict[str, dict[str, int]] = unread(
        "pid -> call class -> threads still inside a host-side call: not waited for, locked or frozen (yet)", factory=dict)
    freeze_s: float = unread()
    pin_s: float = unread()
    settle_s: float | None = note("seconds the entry waited for the SM clock (`regions.settle_max_s`; 0: no wait)",
                                  None)
    settle_max_s: float = unread("the bound of that wait: the region's own request (`region(settle_s=...)`), else "
                                 "`regions.settle_max_s`", 0.0)
    enter_s: float = unread("the whole entry")
    sm_clock_mhz: float | None = unread("at the grant", None)
    throttle: list[str] | None = unread("", None)
    power_w: float | None = unread("", None)
    temp_c: float | None = unread("", None)
    top_clock_mhz: float | None = unread("the SM clock the GPU is set to hold (application clock, else its highest)",
                                         None, omit_none=True)
    on_clock: bool | None = note("SM clock within `telemetry.clock_tolerance` of the GPU's top clock, or above it; "
                                 "null: unknown or the GPU idle", None)
    flags: list[str] | None = None
    others_calls: int = unread("the other tenants' intercepted calls so far")
    granted_mono_ns: int = unread("CLOCK_MONOTONIC")
    gpus: list[int] | None = note("a region over a set of GPUs: the set (ascending); it has a row per GPU, each "
                                  "with this one region id; absent on one GPU", None, omit_none=True)


@event("region_released")
class RegionReleased(Event):
    """everything given back"""
    gpu: int
    region: int
    kind: str = unread()
    tenant_id: int | None = unread()
    reason: str = note("`released`, `tenant disconnected`, `held past the ... limit ...`, `lease expired`, ...")
    hold_s: float = unread("seconds from grant to release; the exit's steps follow")
    unpin_s: float = unread()
    thaw_s: float = unread()
    late_frozen: list[int] = unread("tenant ids frozen during the hold, once out of the host-side call entry let them "
                                    "finish, or once a process of theirs the gate cannot hold was seen on the GPU",
                                    factory=list)
    open_s: float = unread()
    held_back: int = unread("the other tenants' threads parked at the gate at the release, and processes "
                          "driver-locked: a next entry waits `regions.gap_s` for them", 0)
    released_mono_ns: int = unread("CLOCK_MONOTONIC")
    others_calls: int = unread("the same as at the grant: none of them submitted meanwhile")
    exit_sm_clock_mhz: float | None = unread("the SM clock, power, temperature and throttle reasons at the release",
                                             None)
    exit_power_w: float | None = unread("", None)
    exit_temp_c: float | None = unread("", None)
    exit_throttle: list[str] | None = unread("", None)
    exit_on_clock: bool | None = unread("as `on_clock` of the grant", None)
    exit_flags: list[str] = note("as `flags` of the grant, at the release, and the hold's findings with their "
                                 "figure (`cpu:waited-12.0ms`, `tenants:0-ended,2-in-driver`, `clock-dip:1650MHz`; "
                                 "version 5)", factory=list)
    verdict: str = note("certificate: `verified`, `perturbed` (exclusive, but the hold's evidence says its trials "
                        "did not run as alone; version 5), `violated` or `unknown` (docs/regions.md)", "unknown")
    verdict_reasons: list[str] = note("one line per witness: gate, processes, clock, then what the hold found (cpu, "
                                      "tenants; version 5)", factory=list)
    integrity: dict[str, Any] | None = note(
        "measurement integrity of the holder's timed windows (docs/integrity.md): `windows`, `clean`, `summary`, "
        "`flags` {name: {count, reason}} for escaped, other_thread, empty, stream_mismatch, patched_harness, "
        "staged_copy; `timing` (the driver's elapsed times of the judged windows: windows, median_ms, min_ms, "
        "p10_ms, p90_ms, max_ms, mean_ms, dropped; None when none was judged or the holder sent none); "
        "None: the holder reported none", None)
    share: str = note("the holder's effective fair-share key", "default")
    gpus: list[int] | None = note("a region over a set of GPUs: the set; `verdict` is this GPU's, the set's is the "
                                  "worst of its rows; absent on one GPU", None, omit_none=True)


@event("region_withdrawn")
class RegionWithdrawn(Event):
    """a request left the queue ungranted (its tenant went away, or entry was
    refused: the reason names the tenants that did not drain)"""
    gpu: int
    region: int
    tenant_id: int | None = unread()
    reason: str = unread()
    gpus: list[int] | None = note("a region over a set of GPUs: the set (ascending); it has a row per GPU, each "
                                  "with this one region id; absent on one GPU", None, omit_none=True)


# --- telemetry and the canary -------------------------------------------------------


@event("telemetry")
class Telemetry(Event):
    """one sample of every GPU"""
    gpus: dict[str, dict[str, Any]] = note(
        "per GPU index: `util_pct`, `mem_used`, `mem_total`, `sm_clock_mhz`, `mem_clock_mhz`, `temp_c`, `power_w`, "
        "`throttle`, `processes`, `simulated`, `time`, `parked`, `draining`, `foreign` (pids the runtime did not "
        "start), `process_memory` (GPU memory per process, most first: `pid`, `mem_used` (bytes; NVML's running "
        "compute processes, the simulator's allocations per process), `foreign`) (null: not available)"
    )


@event("canary_baseline")
class CanaryBaseline(Event):
    """the canary's reference kernels on the idle, warmed GPU"""
    window: int = 30
    gpu: int
    compute_ms: float
    memory_ms: float
    sm_clock_mhz: float | None = unread("", None)
    throttle: list[str] | None = unread("", None)


@event("canary_sample")
class CanarySample(Event):
    """one measurement; the reducer keeps the window and its inflation p50/p95
    and contention factor"""
    where: str = note("`inside` / `outside` a region", "inside")
    flagged: bool = unread("", False)
    gpu: int
    compute_ms: float | None = None
    memory_ms: float | None = None
    sm_clock_mhz: float | None = unread("", None)
    throttle: list[str] | None = unread("", None)


# --- the context pool ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PoolWorkerEvent(Event):
    """Base of the pool's events: which context process, on which GPU."""

    gpu: int
    worker: str = note("its id")


@event("pool_worker_started")
class PoolWorkerStarted(PoolWorkerEvent):
    """a context process was started (warming: imports, context)"""
    pid: int | None
    tenant_id: int | None


@event("pool_worker_ready")
class PoolWorkerReady(PoolWorkerEvent):
    """it created its context and is idle"""
    startup_s: float | None = unread("", None)
    context: str = unread("`sim`, `driver`, `torch`, `none`", "")


@event("pool_worker_busy")
class PoolWorkerBusy(PoolWorkerEvent):
    """it took a pooled command"""
    command: str | None


@event("pool_worker_cleaning")
class PoolWorkerCleaning(PoolWorkerEvent):
    """the command ended; state is being restored, memory freed, health checked"""
    command: str | None = unread("", None)


@event("pool_worker_idle")
class PoolWorkerIdle(PoolWorkerEvent):
    """clean and healthy again: it may take the next command"""
    served: int = 0
    clean_s: float | None = unread("seconds its clean-up took (restore, state check, health check)", None)


@event("pool_worker_replaced")
class PoolWorkerReplaced(PoolWorkerEvent):
    """it was ended and a replacement queued"""
    cause: str = note(
        "`exited` (crashed, `os._exit`, killed from outside), `timeout`, `cancelled`, `recycled`, `threads` (its "
        "command left a thread running, of any kind), `leak` (device memory it could not free), `health`, `cleanup`, "
        "`clean_timeout`, `misbehaved` (a line on its control channel that was not its own expected message, or the "
        "channel closed under a command), `max_commands`, `start_failed`, `state-changed` (a command changed "
        "process-wide state that cannot be "
        "put back; `reason` names it: `state-changed: torch.backends.cuda.matmul.allow_tf32`)"
    )
    reason: str = unread("", "")


@event("pool_worker_stopped")
class PoolWorkerStopped(PoolWorkerEvent):
    """it was ended for good (runtime stopping)"""
    reason: str = unread("", "")


# --- forked mode: the zygotes ---------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ZygoteEvent(Event):
    """Base of the zygotes' events: which zygote, on which GPU."""

    gpu: int
    zygote: str = note("its id")


@event("zygote_started")
class ZygoteStarted(ZygoteEvent):
    """a zygote was started (importing `pool.preload`)"""
    pid: int | None


@event("zygote_ready")
class ZygoteReady(ZygoteEvent):
    """it imported its modules, is safe to fork, and forks forked-mode commands"""
    import_s: float | None = unread("", None)
    modules: list[str] = unread("", factory=list)


@event("zygote_failed")
class ZygoteFailed(ZygoteEvent):
    """it refused to serve for good (a module failed to import or left it unsafe to fork: a thread started,
    the CUDA driver initialised); forked commands on the GPU are refused with `reason`"""
    reason: str


@event("zygote_stopped")
class ZygoteStopped(ZygoteEvent):
    """it ended (crashed, killed, runtime stopping); `restarting`: a new one is on its way"""
    reason: str = unread("", "")
    restarting: bool = False


# --- the runtime stops -------------------------------------------------------------


@event("runtime_stopping")
class RuntimeStopping(Event):
    """SIGTERM/SIGINT received; admission closed"""
    reason: str = unread()


@event("runtime_stopped")
class RuntimeStopped(Event):
    """every command ended; nothing left running"""


# --- the trace ----------------------------------------------------------------------


@event("trace_gap")
class TraceGap(Event):
    """the trace could not record events `first_seq`..`last_seq` (see below);
    written by the trace writer, never published"""
    lost: int
    first_seq: int | None
    last_seq: int | None
    since: float | None = unread("`t` of the first lost event; no `seq` of its own", None)


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m krex_runtime.wire.state.events --markdown")
    sys.stdout.write(markdown_table())
