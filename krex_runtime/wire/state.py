"""Node state and the one reducer that folds events into it.

The runtime applies every event it emits here to build its snapshots; the
console applies the events it receives, and replay applies a trace's events,
with this same function. Events are plain dicts (they are JSON lines in the
trace); docs/trace-format.md lists them.

`apply` updates the state in place and returns it: with hundreds of thousands
of commands a day, copying the whole state per event would cost more than the
event. Callers that need an older state keep a deep copy.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

# How many finished commands a state remembers (the rest are only in the trace).
DEFAULT_KEEP_FINISHED = 1000


@dataclass
class GpuState:
    index: int
    uuid: str
    name: str
    memory_total: int
    simulated: bool
    slots: int
    cpus: list[int] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    queued: int = 0
    paused: bool = False
    started: int = 0
    finished: int = 0
    region_holder: int | None = None  # tenant id; 0 is an operator's lease
    region_kind: str = ""
    region_command: str = ""
    region_seq: int | None = None
    region_since: float | None = None
    region_queue: list[dict[str, Any]] = field(default_factory=list)
    frozen: list[int] = field(default_factory=list)
    regions_granted: int = 0
    last_region: dict[str, Any] = field(default_factory=dict)
    telemetry: dict[str, Any] = field(default_factory=dict)
    parked: int | None = None
    draining: int | None = None
    canary: dict[str, Any] = field(default_factory=dict)
    # The context pool: {"size", "idle", "busy", "warming", "cleaning", "replaced",
    # "reasons": {cause: count}, "workers": {id: {state, pid, tenant_id, served, command}}}
    pool: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommandInfo:
    id: str
    argv: list[str]
    label: str = ""
    gpu_request: int | None = None
    timeout_s: float | None = None
    state: str = "queued"
    gpu: int | None = None
    pid: int | None = None
    tenant_id: int | None = None
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    mode: str = "process"
    worker: str | None = None


@dataclass
class NodeState:
    node: str = ""
    policy: str = ""
    pid: int = 0
    started_at: float = 0.0
    stopping: bool = False
    paused: bool = False
    seq: int = 0
    time: float = 0.0
    gpus: dict[int, GpuState] = field(default_factory=dict)
    commands: dict[str, CommandInfo] = field(default_factory=dict)
    queue: list[str] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    keep_finished: int = DEFAULT_KEEP_FINISHED
    finished_order: deque[str] = field(default_factory=deque)


class EventError(ValueError):
    """An event the reducer cannot fold: a field missing or of the wrong type, or
    a GPU or command the state does not know (the message says which)."""


class UnknownEvent(EventError):
    pass


# --- the shape of each event (docs/trace-format.md), checked by check_event ----

_INT: tuple[type, ...] = (int,)
_NUM: tuple[type, ...] = (int, float)
_STR: tuple[type, ...] = (str,)
_NULL: tuple[type, ...] = (type(None),)
_LIST: tuple[type, ...] = (list,)
_DICT: tuple[type, ...] = (dict,)

# Per field, the types it may hold; a name ending in "?" may be absent. Only
# what the reducer (and the views built on it) reads is listed: other fields
# pass as they are.
_GPU_RECORD = {
    "index": _INT, "uuid": _STR, "name": _STR, "memory_total": _INT, "simulated": (bool,), "slots": _INT,
    "cpus?": _LIST, "pool_size?": _INT,
}
_POOL = {"gpu": _INT, "worker": _STR}
EVENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "runtime_started": {"node": _STR, "policy": _STR, "pid": _INT, "gpus": _LIST, "keep_finished?": _INT},
    "command_queued": {
        "id": _STR, "argv": _LIST, "label?": _STR, "gpu?": _INT + _NULL, "timeout_s?": _NUM + _NULL, "mode?": _STR,
    },
    "command_started": {
        "id": _STR, "gpu": _INT, "pid": _INT + _NULL, "tenant_id": _INT + _NULL, "worker?": _STR + _NULL,
    },
    "command_finished": {
        "id": _STR, "state": _STR, "exit_code?": _INT + _NULL, "signal?": _INT + _NULL, "reason?": _STR,
    },
    "admission_paused": {"gpu?": _INT + _NULL},
    "admission_resumed": {"gpu?": _INT + _NULL},
    "region_requested": {"gpu": _INT, "region": _INT, "tenant_id": _INT + _NULL, "kind": _STR},
    "region_granted": {
        "gpu": _INT, "region": _INT, "tenant_id": _INT + _NULL, "kind": _STR, "command_id?": _STR,
        "frozen?": _LIST, "flags?": _LIST + _NULL,
    },
    "region_released": {"gpu": _INT, "region": _INT, "reason": _STR},
    "region_withdrawn": {"gpu": _INT, "region": _INT},
    "telemetry": {"gpus": _DICT},
    "canary_baseline": {"gpu": _INT, "compute_ms": _NUM, "memory_ms": _NUM, "window?": _INT},
    "canary_sample": {"gpu": _INT, "compute_ms?": _NUM + _NULL, "memory_ms?": _NUM + _NULL, "where?": _STR},
    "pool_worker_started": _POOL | {"pid": _INT + _NULL, "tenant_id": _INT + _NULL},
    "pool_worker_ready": _POOL,
    "pool_worker_busy": _POOL | {"command": _STR + _NULL},
    "pool_worker_cleaning": _POOL,
    "pool_worker_idle": _POOL | {"served?": _INT},
    "pool_worker_replaced": _POOL | {"cause": _STR},
    "pool_worker_stopped": _POOL,
    "runtime_stopping": {},
    "runtime_stopped": {},
    "trace_gap": {"lost": _INT, "first_seq": _INT + _NULL, "last_seq": _INT + _NULL},
}
_EVERY_EVENT = {"seq": _INT, "t": _NUM, "type": _STR}
_GAP_RECORD = {"t": _NUM, "type": _STR}  # written by the trace, not emitted: no seq


def check_event(event: Any) -> None:
    """EventError unless `event` has the fields its type needs, of the right types.
    For data from outside (a trace file); the runtime's own events are trusted."""
    if not isinstance(event, dict):
        raise EventError("an event must be a JSON object")
    check_fields("event", event, _GAP_RECORD if event.get("type") == "trace_gap" else _EVERY_EVENT)
    fields = EVENT_FIELDS.get(event["type"])
    if fields is None:
        raise UnknownEvent(f"unknown event type {event['type']!r}")
    check_fields(event["type"], event, fields)
    if event["type"] == "runtime_started":
        for i, gpu in enumerate(event["gpus"]):
            if not isinstance(gpu, dict):
                raise EventError(f"runtime_started: gpus[{i}] must be an object")
            check_fields(f"runtime_started: gpus[{i}]", gpu, _GPU_RECORD)
    if event["type"] in ("command_queued", "region_granted"):
        key = "argv" if event["type"] == "command_queued" else "frozen"
        want = str if key == "argv" else int
        if not all(isinstance(v, want) and not isinstance(v, bool) for v in event.get(key, [])):
            raise EventError(f"{event['type']}: '{key}' must hold only {_TYPE_NAMES[want]}s")


_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "list", dict: "object",
               type(None): "null"}


def check_fields(where: str, record: dict[str, Any], fields: dict[str, tuple[type, ...]]) -> None:
    for name, types in fields.items():
        key = name.rstrip("?")
        if key not in record:
            if name.endswith("?"):
                continue
            raise EventError(f"{where}: field '{key}' is missing")
        value = record[key]
        # bool is an int to Python, never to a trace; a number must be finite.
        wrong = isinstance(value, bool) and bool not in types or not isinstance(value, types)
        if wrong or isinstance(value, float) and not math.isfinite(value):
            wanted = " or ".join(_TYPE_NAMES[t] for t in types)
            raise EventError(f"{where}: field '{key}' must be {wanted}, not {_describe(value)}")


def _describe(value: Any) -> str:
    return f"{value!r}"[:40] if not isinstance(value, (list, dict)) else _TYPE_NAMES[type(value)]


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
    s.gpus = {
        g["index"]: GpuState(
            index=g["index"],
            uuid=g["uuid"],
            name=g["name"],
            memory_total=g["memory_total"],
            simulated=g["simulated"],
            slots=g["slots"],
            cpus=list(g.get("cpus", [])),
            pool=_empty_pool(g.get("pool_size", 0)),
        )
        for g in e["gpus"]
    }


def _command_queued(s: NodeState, e: dict[str, Any]) -> None:
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
    gpu.running.append(cmd.id)
    gpu.started += 1


def _command_finished(s: NodeState, e: dict[str, Any]) -> None:
    cmd = s.commands.get(e["id"])
    if cmd is None:
        return
    if cmd.state == "queued":
        _leave_queue(s, cmd)
    elif cmd.state == "running" and cmd.gpu in s.gpus:
        gpu = s.gpus[cmd.gpu]
        if cmd.id in gpu.running:
            gpu.running.remove(cmd.id)
        gpu.finished += 1
    cmd.state, cmd.finished_at = e["state"], e["t"]
    cmd.exit_code, cmd.signal, cmd.reason = e.get("exit_code"), e.get("signal"), e.get("reason", "")
    _count(s, e["state"])
    s.finished_order.append(cmd.id)
    while len(s.finished_order) > s.keep_finished:
        s.commands.pop(s.finished_order.popleft(), None)


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
    gpu.regions_granted += 1
    gpu.last_region = {k: v for k, v in e.items() if k.endswith("_s")} | {
        "region": e["region"],
        "tenant_id": e["tenant_id"],
        "sm_clock_mhz": e.get("sm_clock_mhz"),
        "flags": list(e.get("flags") or []),
    }


def _region_released(s: NodeState, e: dict[str, Any]) -> None:
    gpu = _gpu(s, e)
    if gpu.region_seq == e["region"]:
        gpu.last_region = gpu.last_region | {k: v for k, v in e.items() if k.endswith("_s")} | {"reason": e["reason"]}
        gpu.region_holder, gpu.region_kind, gpu.region_command = None, "", ""
        gpu.region_seq, gpu.region_since, gpu.frozen = None, None, []


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
    _count_pool(pool)


def _pool_worker_stopped(s: NodeState, e: dict[str, Any]) -> None:
    pool = _pool_of(s, e)
    pool["workers"].pop(e["worker"], None)
    _count_pool(pool)


def _drop_request(gpu: GpuState, region: int) -> None:
    gpu.region_queue = [q for q in gpu.region_queue if q["seq"] != region]


def _telemetry(s: NodeState, e: dict[str, Any]) -> None:
    for key, sample in e["gpus"].items():
        if not (key.isascii() and key.isdigit()) or not isinstance(sample, dict):
            raise EventError(f"telemetry: gpus must map GPU indices to objects, not {key!r}: {_describe(sample)}")
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
    try:
        s.queue.remove(cmd.id)
    except ValueError:
        return
    if cmd.gpu_request in s.gpus:
        s.gpus[cmd.gpu_request].queued -= 1


def _count(s: NodeState, key: str) -> None:
    s.totals[key] = s.totals.get(key, 0) + 1


REDUCERS: dict[str, Callable[[NodeState, dict[str, Any]], None]] = {
    "runtime_started": _runtime_started,
    "command_queued": _command_queued,
    "command_started": _command_started,
    "command_finished": _command_finished,
    "admission_paused": _admission_paused,
    "admission_resumed": _admission_resumed,
    "region_requested": _region_requested,
    "region_granted": _region_granted,
    "region_released": _region_released,
    "region_withdrawn": _region_withdrawn,
    "telemetry": _telemetry,
    "canary_baseline": _canary_baseline,
    "canary_sample": _canary_sample,
    "pool_worker_started": _pool_worker_started,
    "pool_worker_ready": _pool_worker_ready,
    "pool_worker_busy": _pool_worker_busy,
    "pool_worker_cleaning": _pool_worker_cleaning,
    "pool_worker_idle": _pool_worker_idle,
    "pool_worker_replaced": _pool_worker_replaced,
    "pool_worker_stopped": _pool_worker_stopped,
    "runtime_stopping": _runtime_stopping,
    "runtime_stopped": _runtime_stopped,
    "trace_gap": _trace_gap,
}


def apply(state: NodeState, event: dict[str, Any]) -> NodeState:
    """Fold one event into `state` (in place) and return it."""
    reducer = REDUCERS.get(event.get("type", ""))
    if reducer is None:
        raise UnknownEvent(f"unknown event type {event.get('type')!r}")
    reducer(state, event)
    state.seq = event.get("seq", state.seq)
    state.time = event.get("t", state.time)
    return state


def to_snapshot(state: NodeState) -> dict[str, Any]:
    """Plain data for the PUB socket and the snapshot request."""
    return {
        "node": state.node,
        "policy": state.policy,
        "pid": state.pid,
        "started_at": state.started_at,
        "stopping": state.stopping,
        "paused": state.paused,
        "seq": state.seq,
        "time": state.time,
        "gpus": [copy.deepcopy(vars(g)) for g in state.gpus.values()],
        "commands": [vars(c) | {"argv": list(c.argv)} for c in state.commands.values()],
        "queue": list(state.queue),
        "totals": dict(state.totals),
        "keep_finished": state.keep_finished,
    }


def from_snapshot(data: dict[str, Any]) -> NodeState:
    """Rebuild a state from a snapshot, so a late subscriber can apply newer events."""
    commands = {c["id"]: CommandInfo(**c) for c in data["commands"]}
    finished = sorted(
        (c for c in commands.values() if c.finished_at is not None), key=lambda c: c.finished_at or 0.0
    )
    return NodeState(
        node=data["node"],
        policy=data["policy"],
        pid=data["pid"],
        started_at=data["started_at"],
        stopping=data["stopping"],
        paused=data["paused"],
        seq=data["seq"],
        time=data["time"],
        gpus={g["index"]: GpuState(**g) for g in data["gpus"]},
        commands=commands,
        queue=list(data["queue"]),
        totals=dict(data["totals"]),
        keep_finished=data["keep_finished"],
        finished_order=deque(c.id for c in finished),
    )


def clone(state: NodeState) -> NodeState:
    return copy.deepcopy(state)
