"""Fair share across share keys (host/fair_share.py, regions/region_shares.py):
two keys of one submitter asking for regions at 10:1 (ten tenants against
one) on one simulated GPU get equal shares of its region time, and the
low-rate key's requests wait behind a bounded number of regions; plus the
orders alone, across submitters and within one. (Two submitters, one taking
a fresh key per command: tests/hostile/test_share_keys.py.)"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from region_checks import check_nothing_left
from runtime_helpers import PY, TENANTS, krex_runtime, trace_events, wait_ready

from krex_runtime.host.fair_share import AdmissionOrder, effective_key
from krex_runtime.regions.region_shares import RegionShares
from krex_runtime.testing.local_runtime import wait_until
from krex_runtime.wire.trace.jsonl import read_trace


def submit(rt: Any, share: str, go: Path, regions: int) -> str:
    done = rt.krex("submit", "--share", share, "--", PY, str(TENANTS / "share_regions.py"), str(go), str(regions))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_ten_to_one_gets_equal_region_time_and_a_bounded_wait(make_runtime: Any, tmp_path: Path) -> None:
    rt = krex_runtime(make_runtime, slots=16)
    go = tmp_path / "go"
    many = [submit(rt, "many", go, 6) for _ in range(10)]
    few = submit(rt, "few", go, 12)
    wait_ready(rt, *many, few)  # all of them ask from the same moment on
    go.touch()
    for command_id in [*many, few]:
        assert rt.krex("wait", command_id).returncode == 0
    check_nothing_left(rt.run_dir)
    events = read_trace(rt.trace_path).events
    tenant_of = {e["id"]: e["tenant_id"] for e in events if e["type"] == "command_started"}
    few_tenant = tenant_of[few]
    # The submitter (root, by the kernel's word) first, the key it chose within its share.
    assert {e["share"] for e in trace_events(rt, "command_queued") if e["id"] in many} == {"root/many"}
    # The window in which both keys wanted the GPU: the few key's first request to its last release.
    requested = [i for i, e in enumerate(events) if e["type"] == "region_requested" and e["tenant_id"] == few_tenant]
    released = [i for i, e in enumerate(events) if e["type"] == "region_released" and e["tenant_id"] == few_tenant]
    window = events[requested[0]:released[-1] + 1]
    held = {"few": 0.0, "many": 0.0}
    for e in window:
        if e["type"] == "region_released" and e["kind"] == "region":
            held["few" if e["tenant_id"] == few_tenant else "many"] += e["hold_s"]
    assert abs(held["few"] - held["many"]) <= 0.1 * max(held.values()), held
    # Bounded wait: between a request of the few key and its grant, a few other regions at most (the
    # lag fair share allows, a region's worth of attained time in regions of slightly different
    # lengths), where FIFO would put all ten of the other key's requests ahead of it.
    waiting_since: int | None = None
    worst = 0
    for e in events:
        if e["type"] == "region_requested" and e["tenant_id"] == few_tenant:
            waiting_since = 0
        elif e["type"] == "region_granted" and waiting_since is not None:
            if e["tenant_id"] == few_tenant:
                worst, waiting_since = max(worst, waiting_since), None
            else:
                waiting_since += 1
    assert worst <= 4, worst


def request(seq: int, share: str, kind: str = "region") -> Any:
    return SimpleNamespace(seq=seq, share=share, kind=kind)


def test_the_region_order_is_fair_across_submitters_fifo_within_and_leases_first() -> None:
    shares = RegionShares({"b": 2.0})
    queue: deque[Any] = deque([request(1, "a"), request(2, "a"), request(3, "b"), request(4, "c")])
    shares.charge("a", 1.0)
    shares.charge("b", 1.0)  # weight 2: attained 0.5
    assert [shares.take(queue).seq for _ in range(2)] == [4, 3]  # c has had nothing, then b
    queue.appendleft(request(5, "x", kind="lease"))
    assert shares.take(queue).seq == 5
    assert shares.take(queue).seq == 1  # FIFO within a
    # A submitter back from idle starts level with the least served one waiting: no saved-up credit.
    shares.charge("a", 10.0)
    shares.arrive(request(6, "c"), deque([request(2, "a")]), None)
    assert shares.attained["c"] == shares.attained["a"]


def test_the_region_order_serves_submitters_first_then_their_keys() -> None:
    """A submitter's keys share its part: a/x and a/y against b serve b every
    other region; within a, the keys alternate, weighted by "a/y"."""
    shares = RegionShares({"a/y": 2.0})
    queue: deque[Any] = deque(
        [request(i, key) for i, key in enumerate(["a/x"] * 4 + ["a/y"] * 4 + ["b"] * 4)])
    served = []
    while queue:
        r = shares.take(queue)
        served.append(r.share)
        shares.charge(r.share, 1.0)
    assert served[:8] == ["a/x", "b", "a/y", "b", "a/y", "b", "a/x", "b"], served
    # A fresh key of a's comes back level with a's keys waiting, and a stays one submitter.
    queue = deque([request(20, "a/x"), request(21, "b")])
    shares.arrive(request(22, "a/new"), queue, None)
    assert shares.attained_key["a/new"] == shares.attained_key["a/x"]
    assert set(shares.attained) == {"a", "b"}


def test_admission_interleaves_submitters_by_weight_fifo_within() -> None:
    fair = AdmissionOrder({"heavy": 3.0})
    jobs = [SimpleNamespace(n=i, share=s) for i, s in enumerate(["a"] * 4 + ["b"] * 2 + ["heavy"] * 6)]
    order = [j.share for j, _ in fair.order(jobs, lambda j: j.share)]
    # Each round: one of a, one of b, three of heavy (weight 3), each key FIFO.
    assert order[:5] == ["a", "b", "heavy", "heavy", "heavy"], order
    assert [j.n for j, _ in fair.order(jobs, lambda j: j.share) if j.share == "a"] == [0, 1, 2, 3]


def test_admission_divides_a_submitters_turns_among_its_keys() -> None:
    """A submitter with a fresh key per command gets one turn in two against
    another submitter, its keys sharing its turns; as commands start, the
    order holds."""
    fair = AdmissionOrder({})
    fresh = [SimpleNamespace(n=i, share=effective_key("mallory", f"k{i}")) for i in range(6)]
    steady = [SimpleNamespace(n=10 + i, share=effective_key("alice", "")) for i in range(6)]
    queue = [*fresh, *steady]
    started = []
    while queue:
        job, turn = next(iter(fair.order(queue, lambda j: j.share)))
        fair.started(job.share, turn)
        queue.remove(job)
        started.append(job.share.split("/")[0])
    assert started == ["mallory", "alice"] * 6, started


def test_admission_gives_a_late_key_the_next_slot(make_runtime: Any, tmp_path: Path) -> None:
    rt = make_runtime(policy="ungated", sim=1, slots=1)
    go = tmp_path / "go"
    first = rt.krex("submit", "--share", "many", "--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done").stdout.strip()
    wait_until(lambda: any(e["id"] == first for e in trace_events(rt, "command_started")), 30, "the first to start")
    many = [rt.krex("submit", "--share", "many", "--", "true").stdout.strip() for _ in range(4)]
    few = rt.krex("submit", "--share", "few", "--", "true").stdout.strip()
    go.touch()  # the slot frees with all of them queued
    for command_id in [first, *many, few]:
        assert rt.krex("wait", command_id).returncode == 0
    started = [e["id"] for e in trace_events(rt, "command_started")]
    # FIFO would start it last; fair share starts it as soon as the slot frees (its key runs nothing).
    assert started[:2] == [first, few] and started[2:] == many, started
