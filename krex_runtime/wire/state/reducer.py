"""The reducer: one function per event type, folding an event (its wire
dict, as the trace and the PUB socket carry it) into a NodeState.

The runtime folds every event it emits to build its snapshots, the console
the events it receives, replay a trace's events: all through
`krex_runtime.wire.state.apply.apply`, which looks the function up here. Every
event class of wire/state/events.py has one (a test checks).

A reducer updates the state in place: with hundreds of thousands of
commands a day, copying the whole state per event would cost more than the
event. Callers that need an older state keep a deep copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from krex_runtime.wire.state import events
from krex_runtime.wire.state.command_states import ended_state
from krex_runtime.wire.state.event_check import EventError, describe
from krex_runtime.wire.state.events import DEFAULT_KEEP_FINISHED
from krex_runtime.wire.state.model import REGIONS_KEPT, CommandInfo, GpuState, NodeState

Reducer = Callable[[NodeState, dict[str, Any]], None]
# What runtime_started says of each GPU that the state keeps as it is.
_GPU_IDENTITY = ("index", "uuid", "name", "memory_total", "simulated", "slots")


def _gpu(s: NodeState, e: dict[str, Any]) -> GpuState:
    """The event's GPU, which a runtime_started before it must have announced."""
    gpu = s.gpus.get(e["gpu"])
    if gpu is None:
        raise EventError(f"{e['type']}: GPU {e['gpu']!r} is not one of this runtime's ({sorted(s.gpus)})")
    return gpu


def _runtime_started(s: NodeState, e: dict[str, Any]) -> None:
    s.node, s.policy, s.pid, s.started_at = e["node"], e["policy"], e["pid"], e["t"]
    s.keep_finished = e.get("keep_finished", DEFAULT_KEEP_FINISHED)
    if s.keep_finished < 0:
        raise EventError(f"runtime_started: keep_finished {s.keep_finished} is negative")
    s.stopping = False
    # A trace's earlier run (the runtime restarted): what it left queued or running ended with it.
    for cmd in [c for c in s.commands.values() if c.state in ("queued", "running")]:
        _command_finished(s, {"id": cmd.id, "state": "failed", "t": e["t"], "reason": "the runtime restarted"})
    s.gpus = {
        g["index"]: GpuState(
            **{k: g[k] for k in _GPU_IDENTITY}, cpus=list(g.get("cpus", [])),
            vendor=g.get("vendor", "nvidia"), pool=_empty_pool(g.get("pool_size", 0))
        )
        for g in e["gpus"]
    }


def _command_queued(s: NodeState, e: dict[str, Any]) -> None:
    if e["id"] in s.commands and e["id"] in s.finished_order:  # a restarted runtime's id again:
        s.finished_order.remove(e["id"])  # the earlier command's place must not age out this one
    s.commands[e["id"]] = CommandInfo(
        id=e["id"],
        argv=list(e["argv"]),
        label=e.get("label", ""),
        gpu_request=e.get("gpu"),
        timeout_s=e.get("timeout_s"),
        submitted_at=e["t"],
        mode=e.get("mode", "process"),
    )
    s.queue.append(e["id"])
    _count(s, "submitted")
    if e.get("gpu") in s.gpus:
        s.gpus[e["gpu"]].queued += 1


def _command_started(s: NodeState, e: dict[str, Any]) -> None:
    cmd = s.commands.get(e["id"])
    if cmd is None:
        if s.totals.get("trace_events_lost"):
            return  # its command_queued fell into a trace gap
        raise EventError(f"command_started: command {e['id']!r} was never queued (or is long finished)")
    gpu = _gpu(s, e)
    _leave_queue(s, cmd)
    cmd.state, cmd.gpu, cmd.pid, cmd.tenant_id, cmd.started_at = "running", e["gpu"], e["pid"], e["tenant_id"], e["t"]
    cmd.worker = e.get("worker")
    cmd.gpus = list(e.get("gpus") or [])
    for other in _set_gpus(s, cmd):  # a command placed on a set runs on each of its GPUs
        other.running.append(cmd.id)
    gpu.started += 1
    if cmd.mode == "forked" and gpu.zygote:
        gpu.zygote["forks"] += 1


def _command_finished(s: NodeState, e: dict[str, Any]) -> None:
    cmd = s.commands.get(e["id"])
    if cmd is None:
        return
    if cmd.state == "queued":
        _leave_queue(s, cmd)
    elif cmd.state == "running" and cmd.gpu in s.gpus:
        for other in _set_gpus(s, cmd):
            if cmd.id in other.running:
                other.running.remove(cmd.id)
        s.gpus[cmd.gpu].finished += 1
    cmd.exit_code, cmd.signal, cmd.reason = e.get("exit_code"), e.get("signal"), e.get("reason", "")
    cmd.state, cmd.finished_at = ended_state(e["state"], cmd.exit_code, cmd.signal), e["t"]
    cmd.auto_regions, cmd.unprotected_timings = list(e.get("auto_regions", [])), e.get("unprotected_timings", 0)
    cmd.untracked_timings, cmd.evaluation = e.get("untracked_timings", 0), e.get("evaluation")
    _count(s, cmd.state)
    s.finished_order.append(cmd.id)
    while len(s.finished_order) > s.keep_finished:
        s.commands.pop(s.finished_order.popleft(), None)


def _set_gpus(s: NodeState, cmd: CommandInfo) -> list[GpuState]:
    """The GPUs a running command is placed on: its set, or its one GPU."""
    indices = cmd.gpus or ([] if cmd.gpu is None else [cmd.gpu])
    return [s.gpus[i] for i in indices if i in s.gpus]


def _admission_paused(s: NodeState, e: dict[str, Any]) -> None:
    _set_paused(s, e.get("gpu"), True)


def _admission_resumed(s: NodeState, e: dict[str, Any]) -> None:
    _set_paused(s, e.get("gpu"), False)


def _runtime_stopping(s: NodeState, e: dict[str, Any]) -> None:
    s.stopping = True


def _runtime_stopped(s: NodeState, e: dict[str, Any]) -> None:
    s.stopping = True
    for gpu in s.gpus.values():
        gpu.running.clear()


def _region_requested(s: NodeState, e: dict[str, Any]) -> None:
    entry = {"seq": e["region"], "tenant_id": e["tenant_id"], "kind": e["kind"]}
    queue = _gpu(s, e).region_queue
    if e["kind"] == "lease":
        leases = sum(1 for q in queue if q["kind"] == "lease")
        queue.insert(leases, entry)
    else:
        queue.append(entry)


def _region_granted(s: NodeState, e: dict[str, Any]) -> None:
    gpu = _gpu(s, e)
    _drop_request(gpu, e["region"])
    gpu.region_holder, gpu.region_kind, gpu.region_command = e["tenant_id"], e["kind"], e.get("command_id", "")
    gpu.region_seq, gpu.region_since, gpu.frozen = e["region"], e["t"], list(e.get("frozen", []))
    gpu.region_gpus = list(e.get("gpus") or [])
    gpu.regions_granted += 1
    gpu.last_region = {k: v for k, v in e.items() if k.endswith("_s")} | {
        "region": e["region"],
        "tenant_id": e["tenant_id"],
        "sm_clock_mhz": e.get("sm_clock_mhz"),
        "top_clock_mhz": e.get("top_clock_mhz"),
        "flags": list(e.get("flags") or []),
    }
    cmd = s.commands.get(e.get("command_id") or "")
    if cmd is not None:
        if not e.get("gpus") or e["gpu"] == e["gpus"][0]:  # a region over a set counts once, at its first GPU
            cmd.region_count += 1
        if len(cmd.regions) < REGIONS_KEPT:
            cmd.regions.append(
                {
                    "region": e["region"], "gpu": e["gpu"], "kind": e["kind"], "granted_at": e["t"],
                    "wait_s": e.get("wait_s"), "enter_s": e.get("enter_s"), "sm_clock_mhz": e.get("sm_clock_mhz"),
                    "throttle": e.get("throttle"), "flags": list(e.get("flags") or []), "exit_flags": [],
                    "settle_s": e.get("settle_s"), "on_clock": e.get("on_clock"), "released_at": None, "hold_s": None,
                    "reason": None, "verdict": e.get("verdict"), "verdict_reasons": [], "integrity": None,
                } | ({"gpus": list(e["gpus"])} if e.get("gpus") else {})
            )


def _region_released(s: NodeState, e: dict[str, Any]) -> None:
    gpu = _gpu(s, e)
    cmd = s.commands.get(gpu.region_command) if gpu.region_seq == e["region"] else None
    for record in cmd.regions if cmd is not None else ():
        if record["region"] == e["region"] and record["gpu"] == e["gpu"]:  # a set has a record per GPU
            record.update(released_at=e["t"], hold_s=e.get("hold_s"), reason=e["reason"],
                          exit_flags=list(e.get("exit_flags") or []))
            if e.get("verdict") is not None:
                record["verdict"] = e["verdict"]
                record["verdict_reasons"] = list(e.get("verdict_reasons") or [])
            if isinstance(e.get("integrity"), dict):
                record["integrity"] = e["integrity"]
    if gpu.region_seq == e["region"]:
        gpu.last_region = gpu.last_region | {k: v for k, v in e.items() if k.endswith("_s")} | {"reason": e["reason"]}
        if "verdict" in e:  # traces from before the certificate have none
            gpu.last_region["verdict"] = e["verdict"]
            gpu.verdicts[e["verdict"]] = gpu.verdicts.get(e["verdict"], 0) + 1
        if e.get("kind") == "region":
            _estimate(gpu, e)
        hold = e.get("hold_s")
        if "share" in e and e.get("kind") == "region" and isinstance(hold, (int, float)) and not isinstance(hold, bool):
            gpu.share_region_s[e["share"]] = gpu.share_region_s.get(e["share"], 0.0) + hold  # hold_s is not checked
        gpu.region_holder, gpu.region_kind, gpu.region_command = None, "", ""
        gpu.region_seq, gpu.region_since, gpu.frozen = None, None, []
        gpu.region_gpus = []


ESTIMATE_WINDOW = 100  # regions the passive inflation estimate spans


def _estimate(gpu: GpuState, e: dict[str, Any]) -> None:
    """The inflation a region's measurement may carry, from what the region
    recorded (no load of its own, unlike the canary): none from other tenants
    when the certificate verified it, plus the clock's cost, top / lowest of
    the grant's and the release's SM clock - 1 (what a compute-bound kernel
    loses running below the clock the GPU is set to hold). A region whose
    verdict is not `verified` has no estimate (its interference is not known)
    and is counted as flagged."""
    est = gpu.estimate or {"clock_costs": [], "inside_p50": None, "inside_p95": None, "regions": 0, "flagged": 0}
    est["regions"] += 1
    top: float = gpu.last_region.get("top_clock_mhz") or 0.0
    clocks = [c for c in (gpu.last_region.get("sm_clock_mhz"), e.get("exit_sm_clock_mhz")) if _positive(c)]
    if e.get("verdict") != "verified" or not _positive(top) or not clocks:
        est["flagged"] += e.get("verdict") != "verified"
        gpu.estimate = est
        return
    cost = max(0.0, float(top) / min(float(c) for c in clocks if c is not None) - 1)
    est["flagged"] += cost > 0
    est["clock_costs"] = (est["clock_costs"] + [cost])[-ESTIMATE_WINDOW:]
    est["inside_p50"], est["inside_p95"] = _quantile(est["clock_costs"], 0.5), _quantile(est["clock_costs"], 0.95)
    gpu.estimate = est


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _region_withdrawn(s: NodeState, e: dict[str, Any]) -> None:
    _drop_request(_gpu(s, e), e["region"])


def _trace_gap(s: NodeState, e: dict[str, Any]) -> None:
    """Events the runtime could not write (a full disk): the replayed state
    after this point may miss what they said, and says how many there were.
    The gap has no seq of its own; the next event follows its last lost one."""
    s.totals["trace_events_lost"] = s.totals.get("trace_events_lost", 0) + e["lost"]
    if e.get("last_seq") is not None:
        s.seq = e["last_seq"]


POOL_STATES = ("warming", "idle", "busy", "cleaning")


def _empty_pool(size: int) -> dict[str, Any]:
    return {"size": size, **{k: 0 for k in POOL_STATES}, "replaced": 0, "reasons": {}, "workers": {}}


def _pool_of(s: NodeState, e: dict[str, Any]) -> dict[str, Any]:
    gpu = _gpu(s, e)
    if not gpu.pool:
        gpu.pool = _empty_pool(0)
    return gpu.pool


def _set_worker(s: NodeState, e: dict[str, Any], state: str, **fields: Any) -> None:
    pool = _pool_of(s, e)
    worker = pool["workers"].setdefault(
        e["worker"], {"state": state, "pid": None, "tenant_id": None, "served": 0, "command": None}
    )
    worker["state"] = state
    worker.update(fields)
    _count_pool(pool)


def _count_pool(pool: dict[str, Any]) -> None:
    for k in POOL_STATES:
        pool[k] = 0
    for w in pool["workers"].values():
        pool[w["state"]] = pool.get(w["state"], 0) + 1


def _pool_worker_started(s: NodeState, e: dict[str, Any]) -> None:
    _set_worker(s, e, "warming", pid=e["pid"], tenant_id=e["tenant_id"])


def _pool_worker_ready(s: NodeState, e: dict[str, Any]) -> None:
    _set_worker(s, e, "idle", startup_s=e.get("startup_s"))


def _pool_worker_busy(s: NodeState, e: dict[str, Any]) -> None:
    _set_worker(s, e, "busy", command=e["command"])


def _pool_worker_cleaning(s: NodeState, e: dict[str, Any]) -> None:
    pool = _pool_of(s, e)
    served = pool["workers"].get(e["worker"], {}).get("served", 0) + 1
    _set_worker(s, e, "cleaning", command=None, served=served)


def _pool_worker_idle(s: NodeState, e: dict[str, Any]) -> None:
    _set_worker(s, e, "idle", served=e.get("served", 0))


def _pool_worker_replaced(s: NodeState, e: dict[str, Any]) -> None:
    pool = _pool_of(s, e)
    pool["workers"].pop(e["worker"], None)
    pool["replaced"] += 1
    pool["reasons"][e["cause"]] = pool["reasons"].get(e["cause"], 0) + 1
    pool["last_replaced"] = {"cause": e["cause"], "reason": e.get("reason", ""), "t": e.get("t")}
    _count_pool(pool)


def _pool_worker_stopped(s: NodeState, e: dict[str, Any]) -> None:
    pool = _pool_of(s, e)
    pool["workers"].pop(e["worker"], None)
    _count_pool(pool)


def _zygote(s: NodeState, e: dict[str, Any], state: str, **fields: Any) -> None:
    gpu = _gpu(s, e)
    z = gpu.zygote
    if z.get("id") != e["zygote"]:
        restarts = z.get("restarts", -1) + 1
        z = gpu.zygote = {"id": e["zygote"], "pid": None, "import_s": None, "modules": [], "reason": "",
                          "forks": z.get("forks", 0), "restarts": restarts}
    z["state"] = state
    z.update(fields)


def _zygote_started(s: NodeState, e: dict[str, Any]) -> None:
    _zygote(s, e, "starting", pid=e["pid"])


def _zygote_ready(s: NodeState, e: dict[str, Any]) -> None:
    _zygote(s, e, "ready", import_s=e.get("import_s"), modules=list(e.get("modules", [])))


def _zygote_failed(s: NodeState, e: dict[str, Any]) -> None:
    _zygote(s, e, "failed", reason=e["reason"])


def _zygote_stopped(s: NodeState, e: dict[str, Any]) -> None:
    _zygote(s, e, "stopped", reason=e.get("reason", ""))


def _drop_request(gpu: GpuState, region: int) -> None:
    gpu.region_queue = [q for q in gpu.region_queue if q["seq"] != region]


def _telemetry(s: NodeState, e: dict[str, Any]) -> None:
    for key, sample in e["gpus"].items():
        if not (key.isascii() and key.isdigit()) or not isinstance(sample, dict):
            raise EventError(f"telemetry: gpus must map GPU indices to objects, not {key!r}: {describe(sample)}")
        gpu = s.gpus.get(int(key))
        if gpu is None:
            continue
        gpu.parked, gpu.draining = sample.get("parked"), sample.get("draining")
        gpu.telemetry = {k: v for k, v in sample.items() if k not in ("parked", "draining")}


def _canary_baseline(s: NodeState, e: dict[str, Any]) -> None:
    _gpu(s, e).canary = {
        "baseline_compute_ms": e["compute_ms"],
        "baseline_memory_ms": e["memory_ms"],
        "baseline_sm_clock_mhz": e.get("sm_clock_mhz"),
        "window": e.get("window", 30),
        "inside": [],
        "outside": [],
        "inside_ms": [],
        "outside_ms": [],
        "inside_p50": None,
        "inside_p95": None,
        "outside_p50": None,
        "outside_p95": None,
        "contention": None,
        "samples": 0,
        "flagged": 0,
    }


def _canary_sample(s: NodeState, e: dict[str, Any]) -> None:
    """Inflation = measured / baseline - 1 for both reference kernels; the window
    keeps the last `window` samples of each place (inside, outside a region)."""
    c = _gpu(s, e).canary
    if not c or e.get("compute_ms") is None or e.get("memory_ms") is None:
        return
    if c["baseline_compute_ms"] <= 0 or c["baseline_memory_ms"] <= 0:
        return  # no usable baseline: inflation is not known
    where = "outside" if e.get("where") == "outside" else "inside"
    values = [e["compute_ms"] / c["baseline_compute_ms"] - 1, e["memory_ms"] / c["baseline_memory_ms"] - 1]
    keep = 2 * c["window"]
    c[where] = (c[where] + values)[-keep:]
    c[f"{where}_ms"] = (c[f"{where}_ms"] + [e["compute_ms"], e["memory_ms"]])[-keep:]
    c[f"{where}_p50"], c[f"{where}_p95"] = _quantile(c[where], 0.5), _quantile(c[where], 0.95)
    inside = _quantile(c["inside_ms"], 0.5) if c["inside_ms"] else 0
    if inside > 0 and c["outside_ms"]:
        c["contention"] = _quantile(c["outside_ms"], 0.5) / inside
    c["samples"] += 1
    if e.get("flagged"):
        c["flagged"] += 1


def _quantile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _set_paused(s: NodeState, gpu: int | None, paused: bool) -> None:
    if gpu is None:
        s.paused = paused
    elif gpu in s.gpus:
        s.gpus[gpu].paused = paused


def _leave_queue(s: NodeState, cmd: CommandInfo) -> None:
    if cmd.id in s.queue:
        s.queue.remove(cmd.id)
        if cmd.gpu_request in s.gpus:
            s.gpus[cmd.gpu_request].queued -= 1


def _count(s: NodeState, key: str) -> None:
    s.totals[key] = s.totals.get(key, 0) + 1


REDUCERS: dict[type[events.Event], Reducer] = {
    events.RuntimeStarted: _runtime_started,
    events.CommandQueued: _command_queued,
    events.CommandStarted: _command_started,
    events.CommandFinished: _command_finished,
    events.AdmissionPaused: _admission_paused,
    events.AdmissionResumed: _admission_resumed,
    events.RegionRequested: _region_requested,
    events.RegionGranted: _region_granted,
    events.RegionReleased: _region_released,
    events.RegionWithdrawn: _region_withdrawn,
    events.Telemetry: _telemetry,
    events.CanaryBaseline: _canary_baseline,
    events.CanarySample: _canary_sample,
    events.PoolWorkerStarted: _pool_worker_started,
    events.PoolWorkerReady: _pool_worker_ready,
    events.PoolWorkerBusy: _pool_worker_busy,
    events.PoolWorkerCleaning: _pool_worker_cleaning,
    events.PoolWorkerIdle: _pool_worker_idle,
    events.PoolWorkerReplaced: _pool_worker_replaced,
    events.PoolWorkerStopped: _pool_worker_stopped,
    events.ZygoteStarted: _zygote_started,
    events.ZygoteReady: _zygote_ready,
    events.ZygoteFailed: _zygote_failed,
    events.ZygoteStopped: _zygote_stopped,
    events.RuntimeStopping: _runtime_stopping,
    events.RuntimeStopped: _runtime_stopped,
    events.TraceGap: _trace_gap,
}
