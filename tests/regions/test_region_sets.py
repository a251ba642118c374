"""Regions over a set of GPUs, end to end: real runtimes with several simulated
GPUs, real tenants (Python and C) with the interception library preloaded,
real cgroups. A command placed on a set (`--gpus 2`, `--gpus 0,1`) asks one
region with `region()`; it is granted once every GPU of the set is held
(ascending order, each GPU's queue FIFO), under one id, released together,
and certified on every GPU (docs/regions.md, "Regions over several GPUs").
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest
from region_checks import (
    check_fifo,
    check_held_alone,
    check_nothing_left,
    check_one_holder_per_gpu,
    check_regions_ran,
    check_sets,
    regions_of,
)
from runtime_helpers import (
    PY,
    RECOVERY_BOUND_S,
    TENANTS,
    busy,
    cgroup_root,
    check_hold_limit_outcome,
    command_pid,
    finish,
    frozen_cgroups,
    gpu_state,
    killed_for_the_watchdog,
    krex_runtime,
    output,
    regions_config,
    snapshot,
    submit,
    trace_events,
    wait_ready,
)

from krex_runtime.commands.gpu_placement import GpuAsk, place
from krex_runtime.node import native_build
from krex_runtime.regions.gpu_sets import combine_verdicts
from krex_runtime.regions.region_shares import RegionShares
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until

SET_TENANT = str(TENANTS / "set_regions.py")


def submit_set(rt: Runtime, gpus: str, *argv: str) -> str:
    done = rt.krex("submit", "--gpus", gpus, "--", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def set_busy(rt: Runtime, gpus: str) -> str:
    return submit_set(rt, gpus, PY, SET_TENANT, "--busy", "--kernel-us", "1000")


# --- what needs no runtime ---------------------------------------------------------


def test_place_takes_the_least_loaded_or_the_named_gpus() -> None:
    load = {0: 3, 1: 0, 2: 1}.__getitem__
    assert place(GpuAsk(2), [0, 1, 2], load) == (1, 2)
    assert place(GpuAsk(3), [0, 1], load) is None
    assert place(GpuAsk(2, (0, 2)), [0, 1, 2], load) == (0, 2)
    assert place(GpuAsk(2, (0, 2)), [0, 1], load) is None


def test_a_sets_verdict_is_the_worst_of_its_gpus() -> None:
    verified = ("verified", ["gate: no other call"])
    assert combine_verdicts([(0, verified), (1, verified)]) == (
        "verified", ["GPU 0: gate: no other call", "GPU 1: gate: no other call"])
    assert combine_verdicts([(0, verified), (1, ("unknown", ["processes: n/a"]))])[0] == "unknown"
    worst = combine_verdicts([(0, ("violated", ["gate: pid 7 made 3 calls"])), (1, ("unknown", []))])
    assert worst == ("violated", ["GPU 0: gate: pid 7 made 3 calls"])


# --- placement and environment -------------------------------------------------------


def test_a_command_on_a_set_sees_its_gpus_and_meets_their_gates(make_runtime) -> None:
    rt = krex_runtime(make_runtime, sim=3)
    script = "import os; print(os.environ['KREX_GPUS'], os.environ['CUDA_VISIBLE_DEVICES'], os.environ['KREX_GATE_SET'])"
    done = rt.krex("run", "--json", "--gpus", "1,2", "--", PY, "-c", script)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["gpu"] == 1 and result["gpus"] == [1, 2]
    gpus, visible, gates = output(rt, result["id"]).split()
    assert gpus == "1,2" and visible == "1,2"
    assert gates.split(":") == [str(rt.run_dir / "gates" / f"gpu{i}.gate") for i in (1, 2)]
    started = trace_events(rt, "command_started")[-1]
    assert started["gpu"] == 1 and started["gpus"] == [1, 2]
    queued = trace_events(rt, "command_queued")[-1]
    assert queued["gpus"] == [1, 2] and queued["gpu_count"] == 2
    # --gpus N: the least-loaded N, ascending.
    holder = busy(rt, gpu=0)
    done = rt.krex("run", "--json", "--gpus", "2", "--", PY, "-c", "pass")
    assert json.loads(done.stdout)["gpus"] == [1, 2]
    finish(rt, holder)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--gpus", "0,0"], "names a GPU twice"),
        (["--gpus", "4"], "4 GPUs asked for; this node has 3"),
        (["--gpus", "0,5"], "has no GPU 5"),
        (["--gpus", "2", "--gpu", "0"], "not both"),
        (["--gpus", "2", "--lease"], "a lease is of one GPU"),
        (["--gpus", "two"], "--gpus takes a number of GPUs"),
    ],
)
def test_a_set_that_cannot_be_had_is_refused_with_its_reason(make_runtime, args: list[str], says: str) -> None:
    rt = krex_runtime(make_runtime, sim=3)
    done = rt.krex("submit", *args, "--", PY, "-c", "pass")
    assert done.returncode != 0
    assert says in done.stderr


def test_a_set_is_of_one_vendor_on_a_mixed_node(make_runtime) -> None:
    """Two simulated NVIDIA GPUs (0, 1) and one simulated AMD GPU (2): --gpus N
    is placed among one vendor's GPUs; a set across vendors, or larger than
    any vendor's GPUs, is refused with its reason."""
    rt = make_runtime(policy="krex", sim=2, sim_amd=1, slots=4, extra_config=regions_config())
    done = rt.krex("run", "--json", "--gpus", "2", "--", PY, "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gpus"] == [0, 1]
    for args, says in ((["--gpus", "1,2"], "different vendors"), (["--gpus", "3"], "at most 2 of one vendor")):
        refused = rt.krex("submit", *args, "--", PY, "-c", "pass")
        assert refused.returncode != 0 and says in refused.stderr, refused.stderr


# --- the region over a set -------------------------------------------------------------


def test_one_region_over_the_set_freezes_each_gpus_others(make_runtime, native_built: Path) -> None:
    rt = krex_runtime(make_runtime, sim=3)
    others = [busy(rt, gpu=g) for g in (0, 1, 2)]
    wait_ready(rt, *others)
    holder = submit_set(rt, "0,1", PY, SET_TENANT, "--regions", "1", "--hold-s", "1000")
    wait_until(lambda: all(gpu_state(rt, g)["region_holder"] is not None for g in (0, 1)), 60, "the set to be held")
    state = {g["index"]: g for g in snapshot(rt)["gpus"]}
    assert state[0]["region_seq"] == state[1]["region_seq"]  # one region id, a row per GPU
    assert state[2]["region_holder"] is None  # GPU 2 is not in the set: its tenant runs on
    assert state[0]["region_gpus"] == state[1]["region_gpus"] == [0, 1] and state[2]["region_gpus"] == []
    with rt.client() as c:
        status = c.call("status")
    assert [g["region_gpus"] for g in status["gpus"]] == [[0, 1], [0, 1], []]
    shown = rt.krex("status")
    assert shown.returncode == 0 and shown.stdout.count("gpus 0,1") == 2, shown.stdout
    assert len(frozen_cgroups(cgroup_root(rt))) == 2  # the other tenants of GPUs 0 and 1
    os.kill(command_pid(rt, holder), signal.SIGKILL)
    wait_until(lambda: all(gpu_state(rt, g)["region_holder"] is None for g in (0, 1)), RECOVERY_BOUND_S,
               "every GPU of the set to be released")
    released = [e for e in trace_events(rt, "region_released") if e.get("gpus")]
    assert sorted(e["gpu"] for e in released) == [0, 1] and {e["reason"] for e in released} == {"tenant disconnected"}
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    # The C API asks the same way, and gets the set's region.
    tool = native_build.native_dir() / "tests" / "region_client"
    done = rt.krex("run", "--gpus", "2", "--", str(tool), "enter", "exit")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["enter 0", "exit 0"]
    finish(rt, *others)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    assert check_sets(events, held) == 2


# --- the invariant suite, sets interleaved with single-GPU regions ------------------------


@pytest.mark.parametrize("backend", ["preload", "driver-lock"])
def test_sets_of_two_and_three_interleaved_with_single_gpu_regions(make_runtime, backend: str) -> None:
    """Under load: no deadlock (every command ends with every region granted), one
    holder per GPU, FIFO per GPU, nothing another tenant ran on a held GPU, every
    set held all at once, every certificate verified, nothing left frozen."""
    rt = krex_runtime(make_runtime, backend, sim=3, slots=16)
    load = [set_busy(rt, "0,1"), set_busy(rt, "1,2")]  # tenants of two GPUs, held by each one's regions
    wait_ready(rt, *load)
    singles = [
        submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "3", "--kernel-us", "300", "--repeats", "2",
               "--pause-ms", "30", "--noise", "2", "--noise-us", "300", gpu=i % 3)
        for i in range(9)
    ]
    sets = [
        submit_set(rt, gpus, PY, SET_TENANT, "--regions", "3", "--kernel-us", "300", "--repeats", "2",
                   "--pause-ms", "30", "--noise", "2")
        for gpus in ("0,1", "1,2", "0,2", "3", "2", "0,1,2")
    ]
    check_regions_ran(rt, singles + sets, 3)
    finish(rt, *load)
    events, held, _ = check_held_alone(rt)
    assert check_sets(events, held) == 18
    assert len({(h.region) for h in held}) == 9 * 3 + 18


def test_a_tenant_of_two_gpus_held_by_both_gpus_regions_is_thawed_by_the_last(make_runtime) -> None:
    """A tenant of GPUs 0 and 1 is frozen by a region on GPU 0; a region on GPU 1
    enters meanwhile (it cannot drain a frozen tenant: it shares the freeze) and
    the tenant stays frozen until both are released."""
    rt = krex_runtime(make_runtime, sim=2)
    shared = set_busy(rt, "0,1")
    wait_ready(rt, shared)
    holders = [submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200", "--hold-s", "1000",
                      gpu=g) for g in (0, 1)]
    wait_until(lambda: all(gpu_state(rt, g)["region_holder"] is not None for g in (0, 1)), 60, "both regions")
    root = cgroup_root(rt)
    assert frozen_cgroups(root) == [f"cmd-{shared}"]
    os.kill(command_pid(rt, holders[0]), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt, 0)["region_holder"] is None, RECOVERY_BOUND_S, "GPU 0's release")
    assert frozen_cgroups(root) == [f"cmd-{shared}"]  # GPU 1's region still holds it
    os.kill(command_pid(rt, holders[1]), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt, 1)["region_holder"] is None, RECOVERY_BOUND_S, "GPU 1's release")
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(root) == []
    finish(rt, shared)
    rt.stop()
    drains = [e["drain"] for e in trace_events(rt, "region_granted")]
    assert all(r in ("ok", "exited") for d in drains for r in d.values()), drains


# --- faults ------------------------------------------------------------------------------


def set_behind_gpu1(rt: Runtime, body: str) -> tuple[str, str]:
    """A single region holds GPU 1 (until its command is killed); then a set
    over {0, 1} runs `with region(): BODY`: it holds GPU 0 while it waits for
    GPU 1, behind the single region. It asks straight away: a tenant of GPU 1
    launching there would wait at GPU 1's closed gate. Returns (blocker, set)."""
    blocker = submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200", "--hold-s", "1000",
                     gpu=1)
    wait_until(lambda: gpu_state(rt, 1)["region_holder"] is not None, 60, "GPU 1 held")
    waiter = submit_set(rt, "0,1", PY, "-c", f"from krex_runtime.client import region\nwith region(): {body}")
    wait_until(lambda: gpu_state(rt, 0)["region_holder"] is not None and len(gpu_state(rt, 1)["region_queue"]) == 1,
               60, "the set to hold GPU 0 and queue on GPU 1")
    return blocker, waiter


def test_a_set_waiting_for_its_next_gpu_is_withdrawn_with_what_it_holds(make_runtime) -> None:
    rt = krex_runtime(make_runtime, sim=2)
    blocker, waiter = set_behind_gpu1(rt, "pass")
    os.kill(command_pid(rt, waiter), signal.SIGKILL)
    wait_until(lambda: gpu_state(rt, 0)["region_holder"] is None and gpu_state(rt, 1)["region_queue"] == [],
               RECOVERY_BOUND_S, "the set's GPU 0 released and its GPU 1 request withdrawn")
    finish(rt, blocker)
    check_nothing_left(rt.run_dir)


@pytest.mark.parametrize("action", ["revoke", "kill"])
def test_a_set_over_the_hold_limit_is_released_on_every_gpu(make_runtime, action: str) -> None:
    rt = krex_runtime(make_runtime, sim=2, hold_limit_s=1.0, on_hold_limit=action)
    others = [busy(rt, gpu=g) for g in (0, 1)]
    wait_ready(rt, *others)
    holder = submit_set(rt, "2", PY, SET_TENANT, "--regions", "1", "--hold-s", "4")
    done = rt.krex("wait", "--json", holder)
    released = [e for e in trace_events(rt, "region_released") if e.get("gpus")]
    assert sorted(e["gpu"] for e in released) == [0, 1] and all("limit" in e["reason"] for e in released)
    check_hold_limit_outcome(rt, done, holder, action, others)


def test_runtime_killed_while_a_set_is_held(make_runtime) -> None:
    """The watchdog thaws and reopens every GPU of the set."""
    rt = krex_runtime(make_runtime, sim=2)
    base = hygiene.baseline()
    others = [busy(rt, gpu=g) for g in (0, 1)]
    wait_ready(rt, *others)
    submit_set(rt, "2", PY, SET_TENANT, "--regions", "1", "--hold-s", "1000")
    root = cgroup_root(rt)
    wait_until(lambda: all(gpu_state(rt, g)["region_holder"] is not None for g in (0, 1))
               and len(frozen_cgroups(root)) == 2, 60, "the set to be held, the others frozen")
    said = killed_for_the_watchdog(rt, base, RECOVERY_BOUND_S)
    assert {"reopened gpu0.gate", "reopened gpu1.gate"} <= set(said), said


# --- fair share and leases with sets ------------------------------------------------------


def submit_shared(rt: Runtime, share: str, where: list[str], *argv: str) -> str:
    done = rt.krex("submit", "--share", share, *where, "--", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def replay_gpu_order(events: list[dict], gpu: int, key_of: dict[int, str]) -> list[tuple[str, str]]:
    """Replays one GPU's region queue through region_shares.py's rule, from the
    trace: each request arrives at its region_requested (levelled against the
    requests outstanding then: queued or being served), each holder is charged
    its hold_s at its release, and each grant is matched against what the rule
    takes from the requests then queued. Returns (granted key, expected key) for
    every grant made while both keys had a request queued.

    The trace pins it down: one GPU grants one region at a time, so every
    charge before a take is a release traced before that grant; a request
    traced between the last release and the grant may have come after the take,
    but only a key's older request is ever taken, and both keys had an older
    one queued at every grant compared."""
    shares = RegionShares({})
    outstanding: dict[int, SimpleNamespace] = {}  # region -> request, from requested to released
    queued: list[int] = []  # regions requested, not yet granted, in order
    since_release: set[int] = set()  # requested after the last release: maybe after the take
    pairs = []
    for e in events:
        if e.get("gpu") != gpu or e.get("kind", "region") != "region":
            continue
        if e["type"] == "region_requested":
            req = SimpleNamespace(share=key_of[e["tenant_id"]], kind="region", seq=e["region"])
            shares.arrive(req, deque(outstanding.values()), None)
            outstanding[e["region"]] = req
            queued.append(e["region"])
            since_release.add(e["region"])
        elif e["type"] == "region_granted":
            before = [r for r in queued if r not in since_release or r == e["region"]]
            keys = {outstanding[r].share for r in before}
            if len(keys) == 2:
                expected = shares.take(deque(outstanding[r] for r in before)).share
                pairs.append((outstanding[e["region"]].share, expected))
            queued.remove(e["region"])
        elif e["type"] == "region_released":
            shares.charge(outstanding.pop(e["region"]).share, e["hold_s"])
            since_release.clear()
        elif e["type"] == "region_withdrawn":
            outstanding.pop(e["region"], None)
            if e["region"] in queued:
                queued.remove(e["region"])
    return pairs


def test_sets_and_single_gpu_regions_share_a_gpu_by_fair_share(make_runtime, tmp_path: Path) -> None:
    """Two share keys wait for GPU 0 from the same moment: one asks regions over
    {0, 1}, the other single-GPU regions on GPU 0. region_shares.py gives GPU 0
    to the key with the least region time held so far (a set's part on GPU 0
    counts from its grant there, its wait for GPU 1 included), FIFO within a
    key: so grants alternate while the two keys' holds are about as long, and
    the one behind gets the next turn whenever they are not. Neither starves:
    every turn is checked against the rule, replayed from the trace."""
    rt = krex_runtime(make_runtime, sim=2)
    go = tmp_path / "go"
    tenant = [PY, str(TENANTS / "share_regions.py"), str(go), "5"]
    pairs = [submit_shared(rt, "pair", ["--gpus", "0,1"], *tenant) for _ in range(2)]
    singles = [submit_shared(rt, "single", ["--gpu", "0"], *tenant) for _ in range(2)]
    wait_ready(rt, *pairs, *singles)
    go.touch()  # all four ask from the same moment on
    for command_id in pairs + singles:
        done = rt.krex("wait", command_id)
        assert done.returncode == 0, done.stderr
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    started = {e["id"]: e["tenant_id"] for e in events if e["type"] == "command_started"}
    queued = {e["id"]: e["share"] for e in events if e["type"] == "command_queued"}
    key_of = {started[c]: queued[c].split("/")[-1] for c in pairs + singles}
    assert set(key_of.values()) == {"pair", "single"}
    assert check_sets(events, held) == 10
    check_one_holder_per_gpu(events)
    for key in ("pair", "single"):  # FIFO within a key, per GPU
        check_fifo([e for e in events if e.get("tenant_id") in {t for t, k in key_of.items() if k == key}
                    or e["type"] not in ("region_requested", "region_granted")])
    # GPU 0's grants follow the rule exactly, and interleave.
    compared = replay_gpu_order(events, 0, key_of)
    assert len(compared) >= 8, compared
    assert [g for g, _ in compared] == [x for _, x in compared], compared
    # Both asked at once: each key's first turn comes before either's second.
    # How often turns alternate after that follows the holds' lengths (the
    # replay above checks each turn against them), which a loaded machine stretches.
    order = [key_of[e["tenant_id"]] for e in events if e["type"] == "region_granted" and e["gpu"] == 0]
    assert order[:2] in (["pair", "single"], ["single", "pair"]), order


def lease_in_background(rt: Runtime, gpu: int) -> tuple[threading.Thread, list]:
    """`krex lease GPU` waits until the lease is granted: it runs in a thread."""
    answer: list = []
    thread = threading.Thread(target=lambda: answer.append(rt.krex("lease", str(gpu), "--ttl", "120")))
    thread.start()
    return thread, answer


def test_a_set_waits_out_an_operators_lease_of_one_of_its_gpus(make_runtime) -> None:
    """A set that holds GPU 0 and waits for GPU 1 meets an operator's lease of
    GPU 1: the lease goes first (ahead of queued regions), freezes the set's
    tenant (a tenant of GPU 1) while the set keeps GPU 0, and the set is granted
    once the lease is released; nothing deadlocks, nothing is left frozen."""
    rt = krex_runtime(make_runtime, sim=2)
    other = busy(rt, gpu=1)
    wait_ready(rt, other)
    blocker, waiter = set_behind_gpu1(rt, "print('held')")
    set_tenant = gpu_state(rt, 0)["region_holder"]
    thread, answer = lease_in_background(rt, 1)
    wait_until(lambda: [q["kind"] for q in gpu_state(rt, 1)["region_queue"]] == ["lease", "region"], 60,
               "the lease queued ahead of the set")
    os.kill(command_pid(rt, blocker), signal.SIGKILL)
    thread.join(60)
    assert answer and answer[0].returncode == 0, answer and answer[0].stderr
    state = {g: gpu_state(rt, g) for g in (0, 1)}
    assert state[1]["region_kind"] == "lease"
    assert state[0]["region_holder"] == set_tenant  # GPU 0 stays the set's while it waits
    assert [q["tenant_id"] for q in state[1]["region_queue"]] == [set_tenant]
    granted_sets = [e for e in trace_events(rt, "region_granted") if e.get("gpus") and e["gpu"] == 1]
    assert granted_sets == []
    assert f"cmd-{waiter}" in frozen_cgroups(cgroup_root(rt))  # the lease froze GPU 1's tenants
    assert rt.krex("release", "1").returncode == 0
    done = rt.krex("wait", waiter)
    assert done.returncode == 0, done.stderr
    assert output(rt, waiter).strip() == "held"
    finish(rt, other)
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    rt.stop()
    events, held = regions_of(rt.trace_path)
    assert check_sets(events, held) == 1
    check_one_holder_per_gpu(events)
    lease_released = next(i for i, e in enumerate(events) if e["type"] == "region_released" and e["kind"] == "lease")
    set_granted = next(i for i, e in enumerate(events)
                       if e["type"] == "region_granted" and e.get("gpus") and e["gpu"] == 1)
    assert set_granted > lease_released


def test_a_set_is_placed_off_a_leased_gpu_or_waits_for_it(make_runtime) -> None:
    """With GPU 1 leased on a node of three: `--gpus 2` takes GPUs 0 and 2, a set
    that names GPU 1 (or needs all three) stays queued, and starts once the
    lease ends."""
    rt = krex_runtime(make_runtime, sim=3)
    assert rt.krex("lease", "1", "--ttl", "120").returncode == 0
    script = [PY, "-c", "from krex_runtime.client import region\nwith region(): print('held')"]
    done = rt.krex("run", "--json", "--gpus", "2", "--", *script)
    assert done.returncode == 0, done.stderr
    placed = json.loads(done.stdout)
    assert placed["gpus"] == [0, 2] and output(rt, placed["id"]).strip() == "held"
    named = submit_set(rt, "0,1", *script)
    everything = submit_set(rt, "3", *script)
    assert snapshot(rt)["queue"] == [named, everything]
    assert rt.krex("release", "1").returncode == 0
    for command_id in (named, everything):
        result = rt.krex("wait", "--json", command_id)
        assert result.returncode == 0, result.stderr
        assert output(rt, command_id).strip() == "held"
    started = {e["id"]: e["gpus"] for e in trace_events(rt, "command_started")}
    assert started[named] == [0, 1] and started[everything] == [0, 1, 2]
    check_nothing_left(rt.run_dir)
    rt.stop()
    events, held = regions_of(rt.trace_path)
    assert check_sets(events, held) == 3
    check_one_holder_per_gpu(events)
