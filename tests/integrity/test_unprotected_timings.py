"""Unprotected-timing detection end to end (native/src/intercept/intercept_events.c,
shared by the CUDA and the HIP library): a C tenant times with its vendor's
events inside one region, outside, across two regions and (CUDA) through the
_v1 entry point from cuGetProcAddress or (HIP) on the per-thread stream; the
count reaches `krex run`'s warning line and `--json`. A tenant holding
thousands of live events (do_bench's pattern) is never counted; one holding
more than the library's table can track gets its timings counted untracked,
apart."""

from __future__ import annotations

import json
import subprocess
from typing import Any, NamedTuple

import pytest
from runtime_helpers import REPO, VENDORS, krex_runtime, simulated_gpus, trace_events

from krex_runtime.testing.local_runtime import command

TESTS = REPO / "native" / "build" / "tests"
EVENT_TABLE = TESTS / "event_table"


class Timer(NamedTuple):
    """A vendor's C tenant that takes timings in and out of regions, and what it should cost."""

    target: str  # its make target in native/
    argv: list[str]
    unprotected: int
    regions: int
    protected_windows: str  # the integrity line's count of timed windows


TIMERS = {
    # native/tests/event_timing.c: the protected timings (1 and 4) each time one launch on the stream of their events
    "nvidia": Timer("build/tests/event_timing", [str(TESTS / "event_timing")], 4, 5, "2 timed windows"),
    # native/tests/hip_tenant.c `timing`: the protected timing (1) times one launch
    "amd": Timer("hip-tests", [str(TESTS / "hip_tenant"), "timing"], 3, 4, "1 timed window"),
}


def _run(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command("krex"), "run", "--json", "--", *argv], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("vendor", VENDORS)
def test_event_timings_outside_or_across_regions_are_counted(make_runtime: Any, vendor: str) -> None:
    timer = TIMERS[vendor]
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), timer.target], check=True)
    rt = krex_runtime(make_runtime, vendor=vendor)
    done = _run(rt.env, timer.argv)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stdout"].strip() == f"expected {timer.unprotected}"
    assert result["unprotected_timings"] == timer.unprotected and result["untracked_timings"] == 0
    id_ = result["id"]
    assert done.stderr.strip().splitlines() == [
        f"krex: warning: {id_} took {timer.unprotected} CUDA-event timing(s) outside a region: "
        "those measurements are not protected",
        f"krex: {id_}: integrity: clean ({timer.protected_windows})"]
    finished = [e for e in trace_events(rt, "command_finished") if e["id"] == id_]
    assert finished[0]["unprotected_timings"] == timer.unprotected
    assert len([e for e in trace_events(rt, "region_granted") if e["kind"] == "region"]) == timer.regions

    # Under another policy nothing tells a region from none: nothing is counted.
    plain = make_runtime(name="ungated", policy="ungated", **simulated_gpus(vendor))
    done = _run(plain.env, timer.argv)
    assert done.returncode == 0 and json.loads(done.stdout)["unprotected_timings"] == 0
    assert "warning" not in done.stderr


def test_a_harness_holding_thousands_of_events_is_counted_truthfully(make_runtime: Any) -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/tests/event_table"], check=True)
    rt = krex_runtime(make_runtime)

    def run(pairs: int) -> tuple[dict, list[str]]:
        done = subprocess.run([*command("krex"), "run", "--json", "--", str(EVENT_TABLE), str(pairs)], env=rt.env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["stdout"].strip() == "expected 1"
        return result, done.stderr.strip().splitlines()

    # 6000 windows read at the end, as do_bench does: only the one timing
    # outside the region is unprotected.
    result, _ = run(6000)
    assert (result["unprotected_timings"], result["untracked_timings"]) == (1, 0)

    # 30000 windows: more live events than the table holds. Those it cannot
    # track are untracked, apart, with a warning of their own; the timing
    # outside is still the one unprotected.
    result, stderr = run(30000)
    untracked, id_ = result["untracked_timings"], result["id"]
    assert result["unprotected_timings"] == 1 and 0 < untracked < 30000
    assert stderr[:2] == [
        f"krex: warning: {id_} took 1 CUDA-event timing(s) outside a region: those measurements are not protected",
        f"krex: warning: {id_} took {untracked} CUDA-event timing(s) the interception library could not track "
        "(too many live events): not known to be protected"]
    finished = [e for e in trace_events(rt, "command_finished") if e["id"] == id_]
    assert (finished[0]["unprotected_timings"], finished[0]["untracked_timings"]) == (1, untracked)
