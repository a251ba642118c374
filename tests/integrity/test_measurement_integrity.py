"""Measurement integrity end to end (native/src/intercept/intercept_integrity.c,
docs/integrity.md): a C tenant on the simulated driver runs the catalogue of
timing hacks, one region each, and honest timings beside them; each region's
integrity record names its hack (or says clean) in the trace's
region_released, `krex run --json` and the end line."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from integrity_catalogue import timing_summary
from runtime_helpers import REPO, TENANTS, krex_runtime, trace_events

from krex_runtime import region_wire
from krex_runtime.testing.local_runtime import command

HACKS = REPO / "native" / "build" / "tests" / "integrity_hacks"
TIMING = REPO / "native" / "build" / "tests" / "integrity_timing"
# scenario -> the flags its region's record must carry (none: clean)
EXPECTED = {
    "honest": set(),
    "side_stream": {"escaped"},
    "thread": {"other_thread"},
    "launch_only": {"empty"},
    "other_stream": {"stream_mismatch"},
    "fork_join": set(),
    "synced": set(),
    "legacy": set(),
    "graph": set(),
    "graph_side": {"escaped"},
    "side_only": set(),
    "two_sides": set(),
    "start_fork": set(),
    "side_unjoined": {"escaped", "stream_mismatch"},
    "many_events": set(),
}


def test_each_hack_is_flagged_and_honest_timings_are_clean(make_runtime: Any) -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/tests/integrity_hacks"], check=True)
    rt = krex_runtime(make_runtime)
    done = subprocess.run([*command("krex"), "run", "--json", "--", str(HACKS)], env=rt.env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    scenarios = result["stdout"].split()
    assert scenarios == list(EXPECTED)
    records = [r["integrity"] for r in result["regions"]]
    assert len(records) == len(EXPECTED)
    for name, rec in zip(scenarios, records, strict=False):
        assert rec is not None, name
        assert rec["windows"] == 1, (name, rec)
        assert set(rec["flags"]) == EXPECTED[name], (name, rec)
        assert rec["clean"] == (not EXPECTED[name]), (name, rec)
        if not EXPECTED[name]:
            assert rec["summary"] == "integrity: clean (1 timed window)"
        for flag in rec["flags"].values():
            assert flag["count"] == 1 and flag["reason"]

    released = [e for e in trace_events(rt, "region_released") if e.get("kind") == "region"]
    assert [set((e["integrity"] or {}).get("flags", {})) for e in released[-len(EXPECTED):]] == list(EXPECTED.values())
    assert f"krex: warning: {result['id']}: integrity: flagged in 6 of 15 region(s)" in done.stderr


def test_the_apis_region_keeps_the_timing_typed() -> None:
    from krex_runtime.api.results import Region
    from krex_runtime.wire.protocol.envelope import ProtocolError

    timing = {"windows": 2, "median_ms": 1, "min_ms": 0.5, "p10_ms": 0.6, "p90_ms": 1.4, "max_ms": 1.5,
              "mean_ms": 1.0, "dropped": 0}
    record = {"windows": 2, "clean": True, "summary": "integrity: clean (2 timed windows)", "flags": {}}
    got = Region.from_record({"region": 1, "integrity": {**record, "timing": timing}}).integrity
    assert got is not None and got["timing"] == {**timing, "median_ms": 1.0, "host_paced": None}
    paced = Region.from_record({"region": 1, "integrity": {**record, "timing": {**timing, "host_paced": 2}}}).integrity
    assert paced is not None and paced["timing"]["host_paced"] == 2
    assert isinstance(got["timing"]["median_ms"], float)
    # A runtime from before the timing: none.
    assert Region.from_record({"region": 1, "integrity": record}).integrity["timing"] is None  # type: ignore[index]
    for bad in ({**timing, "median_ms": "fast"}, {**timing, "windows": 2.5}, "1,2,3"):
        with pytest.raises(ProtocolError, match="timing"):
            Region.from_record({"region": 1, "integrity": {**record, "timing": bad}})
    no_median = {k: v for k, v in timing.items() if k != "median_ms"}
    with pytest.raises(ProtocolError, match="median_ms"):
        Region.from_record({"region": 1, "integrity": {**record, "timing": no_median}})


def test_the_record_carries_the_drivers_times_of_its_windows(make_runtime: Any) -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/tests/integrity_timing"], check=True)
    rt = krex_runtime(make_runtime)
    done = subprocess.run([*command("krex"), "run", "--json", "--", str(TIMING)], env=rt.env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    lines = dict(line.split(" ", 1) for line in result["stdout"].splitlines())
    times = [float(t) for t in lines["times"].split()]
    first, nothing, many, paced, ahead = (r["integrity"] for r in result["regions"])
    # Nine windows, each asked once more at the end: kept once, the driver's own floats.
    assert first["windows"] == 9 and first["clean"], first
    timing = first["timing"]
    assert {k: v for k, v in timing.items() if k != "host_paced"} == {"windows": 9, "dropped": 0,
                                                                      **timing_summary(times)}, (timing, times)
    # Whether the host paced a window depends on how far ahead it issued: a count, not a figure.
    assert 0 <= timing["host_paced"] <= 9, timing
    # Each simulated kernel ran its duration inside its window (a floor, not a timing).
    assert timing["min_ms"] >= 0.02 and timing["max_ms"] >= 0.18, timing
    # What the tenant asked of the library inside the region is what the record says.
    asked = region_wire.parse_timing(lines["summary"])
    assert asked is not None and timing == asked
    # No window judged: no timing, the record says so.
    assert nothing is not None and nothing["windows"] == 0 and nothing["timing"] is None, nothing
    # Past the cap: the first 4096 kept, the rest counted as dropped; every window still judged.
    assert many["windows"] == 4100 and many["timing"]["windows"] == 4096 and many["timing"]["dropped"] == 4, many
    assert many["timing"] == region_wire.parse_timing(lines["kept"])
    released = [e for e in trace_events(rt, "region_released") if e.get("kind") == "region"]
    assert [e["integrity"] for e in released[-5:]] == [first, nothing, many, paced, ahead]
    # The host paced every window of region 4 (its sleep between two launches is inside each);
    # region 5's were issued microseconds apart around 20 ms kernels: not all of them host-paced,
    # whatever the machine's load (each would need a 16 ms stall between two calls).
    assert paced["timing"]["windows"] == 5 and paced["timing"]["host_paced"] == 5, paced
    assert ahead["timing"]["windows"] == 5 and ahead["timing"]["host_paced"] < 5, ahead


def test_a_harness_patched_after_import_is_flagged(make_runtime: Any) -> None:
    rt = krex_runtime(make_runtime)
    env = {**rt.env, "PYTHONPATH": str(TENANTS / "harness")}
    done = subprocess.run([*command("krex"), "run", "--json", "--auto-region", "--", sys.executable,
                           str(TENANTS / "patched_harness.py")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    seen = json.loads(result["stdout"].strip().splitlines()[-1])
    # The honest region: do_bench's 4 event timings, each a launch on the stream of its events.
    assert seen["honest"]["summary"] == "integrity: clean (4 timed windows)"
    assert set(seen["after"]["flags"]) == {"patched_harness"}
    assert "triton.testing:do_bench" in seen["after"]["flags"]["patched_harness"]["reason"]
    records = [r["integrity"] for r in result["regions"]]
    assert records == [seen["honest"], seen["after"]]


def test_exit_words_from_a_tenant_are_read_strictly() -> None:
    assert region_wire.parse_exit("") == (None, [], None)
    assert region_wire.parse_exit("integrity=3,1,0,0,0") == (
        {"windows": 3, "escaped": 1, "other_thread": 0, "empty": 0, "stream_mismatch": 0}, [], None)
    for bad in ("integrity=1,2,3", "integrity=a,0,0,0,0", "integrity=-1,0,0,0,0", "integrity=1,0,0,0,0,0",
                "integrity=" + "9" * 30 + ",0,0,0,0", "integrity=\uff11,0,0,0,0"):
        assert region_wire.parse_exit(bad) == (None, [], None), bad
    counts, patched, _ = region_wire.parse_exit("harness=a.b:c harness=x<y>;rm harness=1 harness=2 harness=3 harness=4")
    assert counts is None and patched == ["a.b:c", "xyrm", "1", "2"]  # odd characters dropped, at most 4
    assert region_wire.record(None, []) is None
    rec = region_wire.record(region_wire.parse_counts("0,0,0,0,0"))
    assert rec == {"windows": 0, "clean": True, "summary": "integrity: clean (0 timed windows)", "flags": {},
                   "timing": None}
    rec = region_wire.record(region_wire.parse_counts("5,2,0,1,0"), ["triton.testing:do_bench"])
    assert rec is not None and not rec["clean"]
    assert rec["summary"] == "integrity: flagged (escaped 2, empty 1, patched_harness 1; 5 timed windows)"
    assert region_wire.lines(rec)[1].startswith("escaped: 2 of 5 window(s): work launched")


def test_timing_words_are_read_strictly_and_echoed_exactly() -> None:
    line = "integrity=3,0,0,0,0 timing=3,0.125,0.100000001,0.105000001,0.144999996,0.150000006,0.125,0"
    counts, patched, timing = region_wire.parse_exit(line)
    assert counts is not None and timing == {"windows": 3, "median_ms": 0.125, "min_ms": 0.100000001,
                                             "p10_ms": 0.105000001, "p90_ms": 0.144999996,
                                             "max_ms": 0.150000006, "mean_ms": 0.125, "dropped": 0,
                                             "host_paced": None}  # a library before host_paced
    rec = region_wire.record(counts, patched, timing)
    assert rec is not None and rec["timing"] == timing and rec["clean"]
    # RELEASED echoes the very floats: the client's record is the runtime's.
    echoed = region_wire.words("3,0,0,0,0", [], region_wire.timing_text(timing))
    assert region_wire.record(*region_wire.parse_exit(echoed)) == rec
    # An older client's EXIT (no timing) still makes a record; a timing without counts is ignored.
    assert region_wire.record(*region_wire.parse_exit("integrity=3,0,0,0,0"))["timing"] is None  # type: ignore[index]
    assert region_wire.parse_exit("timing=1,1,1,1,1,1,1,0") == (None, [], None)
    # With the host-paced count: read, and echoed back to the same record.
    _, _, paced = region_wire.parse_exit(line + ",2")
    assert paced is not None and paced["host_paced"] == 2
    again = region_wire.parse_timing(region_wire.timing_text(paced))
    assert again == paced
    for bad in ("3,1,1,1,1,1,1,0,-1", "3,1,1,1,1,1,1,0,x", "3,1,1,1,1,1,1,0,2,9"):
        assert region_wire.parse_timing(bad) is None, bad
    for bad in ("1,1,1,1,1", "0,1,1,1,1,1,1,0", "4097,1,1,1,1,1,1,0", "1,nan,1,1,1,1,1,0", "1,inf,1,1,1,1,1,0",
                "1,1_0,1,1,1,1,1,0", "1,-1,-1,-1,-1,-1,-1,0", "2,5,1,1,1,2,1,0", "1,1e999,1,1,1,1e999,1,0",
                "1,1,1,1,1,1,1,-1", "1,1,1,1,1,1,1,x", "1,\uff11,1,1,1,1,1,0"):
        assert region_wire.parse_exit(f"integrity=1,0,0,0,0 timing={bad}")[2] is None, bad
    # The longest EXIT a client may send fits a line.
    longest = "EXIT " + region_wire.words(",".join(["9" * 19] * 5), ["x" * 60] * 9,
                                          ",".join(["4096", *["1.2345678901234567e-300"] * 6, "9" * 19]))
    assert len(longest) <= region_wire.MAX_LINE - len("RELEASED 18446744073709551615 ") - 64


def many_windows(rt: Any, windows: int, launches: int, **env: str) -> tuple[dict, Any]:
    """Run tests/tenants/many_windows.py under `krex run --json`: (the result, the tenant's own record)."""
    done = subprocess.run([*command("krex"), "run", "--json", "--", sys.executable, str(TENANTS / "many_windows.py"),
                           str(windows), str(launches)], env={**rt.env, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return result, json.loads(result["stdout"].strip().splitlines()[-1])


def test_windows_read_after_the_log_moved_on_are_not_flagged(make_runtime: Any) -> None:
    # do_bench's pattern: 1000 windows of 8 launches each (10 operations a
    # window with the cache clear and the two records), every elapsed time
    # asked at the end. The log holds the last 8192 operations: the first
    # windows' operations are gone by then. They are not judged (not counted),
    # never flagged `empty` for want of the launches the log no longer holds.
    rt = krex_runtime(make_runtime)
    result, seen = many_windows(rt, 1000, 8)
    rec = result["regions"][0]["integrity"]
    assert rec == seen
    assert rec["clean"] and rec["flags"] == {}, rec
    assert 0 < rec["windows"] < 1000, rec


def test_the_bookkeeping_switched_off_makes_no_record(make_runtime: Any) -> None:
    # KREX_INTEGRITY=0 (docs/native.md): the library logs nothing and reports
    # nothing, so the region's record is null, not a clean one.
    rt = krex_runtime(make_runtime)
    on, seen_on = many_windows(rt, 5, 1)
    assert on["regions"][0]["integrity"] == seen_on
    assert seen_on["summary"] == "integrity: clean (5 timed windows)"
    off, seen_off = many_windows(rt, 5, 1, KREX_INTEGRITY="0")
    assert off["regions"][0]["integrity"] is None and seen_off is None, off["regions"]
    released = [e for e in trace_events(rt, "region_released") if e.get("kind") == "region"]
    assert [e["integrity"] for e in released[-2:]] == [seen_on, None]


def test_the_benchmark_of_the_bookkeeping_runs() -> None:
    # benchmarks/integrity_cost.py (docs/BENCHMARKS.md), tiny: its rows and its last line, not its figures.
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "integrity_cost.py"), "--launches", "2000",
                           "--rounds", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split("  ")[0] for line in done.stdout.splitlines()[2:5]]
    assert rows == ["plain", "libkrex, region held", "libkrex, region held + integrity"], done.stdout
    assert done.stdout.splitlines()[-1].startswith("integrity bookkeeping per launch"), done.stdout
