"""Auto-regions end to end: an unmodified candidate timing with stand-in
harnesses (tests/tenants/harness: the entry-point names of triton, torch,
cupyx, which CI does not have) gets a region around every timing call, in
process and pooled mode; the user's own sitecustomize still runs; a command
that never imports a harness imports nothing more than without auto-regions.
The simulator's execution log is the witness of what ran inside a region."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from region_checks import check_nothing_left, check_one_holder_per_gpu, regions_of
from runtime_helpers import TENANTS, krex_runtime, regions_config, stop_and_check

from krex_runtime.commands import auto_regions
from krex_runtime.node.config import Config, ConfigError, RegionSection, validate
from krex_runtime.sim.execution_log import read_execution_log
from krex_runtime.testing.local_runtime import Runtime, command, wait_until
from krex_runtime.wire.protocol.bodies import SubmitBody

HARNESS = TENANTS / "harness"
CANDIDATE = str(TENANTS / "auto_candidate.py")
ALL = ["do_bench", "cudagraph", "timeit", "blocked", "adaptive", "cupyx", "suite", "runner", "nested"]
SUITE = ["--auto-region-entry", "suite_helper:measure", "--auto-region-entry", "suite_helper:Runner.run"]
POOL = '\n[pool]\nsize_per_gpu = 1\npreload = ["krex_runtime.sim.simcuda"]\nzygote = true\n'


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Any) -> Any:
    runtime = Runtime(tmp_path_factory.mktemp("auto") / "rt", policy="krex", sim=1, slots=4,
                      extra_config=regions_config() + POOL).start()
    try:
        yield runtime
        check_nothing_left(runtime.run_dir)
    finally:
        stop_and_check(runtime)


def run(rt: Runtime, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`krex run --json ARGS` with the harnesses on the command's PYTHONPATH: (the result, the candidate's line)."""
    env = {**rt.env, "PYTHONPATH": str(HARNESS)}
    done = subprocess.run([*command("krex"), "run", "--json", *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout)
    return result, json.loads(result["stdout"].strip().splitlines()[-1])


def regions_around_timed_kernels(rt: Runtime, result: dict[str, Any]) -> int:
    """Every `timed` kernel of the command's tenant ran inside one of its regions,
    every `untimed` one outside them; returns how many regions it held."""
    events, held = regions_of(rt.trace_path)
    check_one_holder_per_gpu(events)
    tenant = next(e["tenant_id"] for e in events if e["type"] == "command_started" and e["id"] == result["id"])
    mine = [r for r in held if r.tenant_id == tenant]
    records = [r for r in read_execution_log(rt.root / "sim.log") if r.tenant_id == tenant]
    first = min((r.start_ns for r in records if r.name == "untimed"), default=0)
    records = [r for r in records if r.start_ns >= first]  # a pooled tenant ran earlier commands too
    mine = [r for r in mine if r.released_ns >= first]
    timed = [r for r in records if r.name == "timed"]
    assert timed, "the candidate timed nothing"
    for r in timed:
        assert any(h.granted_ns <= r.start_ns and r.end_ns <= h.released_ns for h in mine), (
            f"timed kernel [{r.start_ns}, {r.end_ns}] outside every region of tenant {tenant}")
    for r in records:
        if r.name == "untimed":
            assert not any(r.start_ns < h.released_ns and r.end_ns > h.granted_ns for h in mine)
    return len(mine)


def test_an_unmodified_candidate_times_in_regions_in_process_mode(rt: Runtime) -> None:
    result, seen = run(rt, "--auto-region", *SUITE, "--", sys.executable, CANDIDATE, *ALL)
    assert set(seen["measured"]) == set(ALL)
    assert seen["user_sitecustomize"], "the user's own sitecustomize did not run"
    assert sorted(result["auto_regions"]) == sorted([
        "triton.testing:do_bench", "triton.testing:do_bench_cudagraph", "torch.utils.benchmark:Timer.timeit",
        "torch.utils.benchmark:Timer.blocked_autorange", "torch.utils.benchmark:Timer.adaptive_autorange",
        "cupyx.profiler:benchmark", "suite_helper:measure", "suite_helper:Runner.run",
    ])
    # One region per harness call: a harness calling another (cudagraph ->
    # do_bench, blocked_autorange -> timeit) and two harness calls inside the
    # candidate's own region() are one region each.
    assert regions_around_timed_kernels(rt, result) == len(ALL)
    assert result["unprotected_timings"] == 0  # the interception library agrees: every timing in a region
    finished = [e for e in regions_of(rt.trace_path)[0] if e["type"] == "command_finished" and e["id"] == result["id"]]
    assert finished[0]["auto_regions"] == result["auto_regions"]


def test_a_command_that_imports_no_harness_sees_no_change(rt: Runtime) -> None:
    plain_result, plain = run(rt, "--", sys.executable, CANDIDATE, "none")
    auto_result, auto = run(rt, "--auto-region", "--", sys.executable, CANDIDATE, "none")
    assert plain_result["auto_regions"] == auto_result["auto_regions"] == []
    assert plain["modules"] == auto["modules"] == []
    assert plain["all_modules"] == auto["all_modules"]
    assert plain["user_sitecustomize"] and auto["user_sitecustomize"]
    assert plain["sitecustomize"] == auto["sitecustomize"] == str(HARNESS / "sitecustomize.py")
    # A Python that imports nothing at all: the same modules, to the last one.
    bare = "import json, sys; print(json.dumps({'modules': sorted(sys.modules)}))"
    assert run(rt, "--", sys.executable, "-c", bare)[1] == run(rt, "--auto-region", "--", sys.executable, "-c", bare)[1]


def test_without_auto_regions_a_harness_runs_unwrapped(rt: Runtime) -> None:
    result, seen = run(rt, "--", sys.executable, CANDIDATE, "do_bench")
    assert result["auto_regions"] == [] and "krex_runtime.tenant.region" not in seen["modules"]
    assert result["unprotected_timings"] == 4  # do_bench's warm-up and 3 repetitions, each event-timed


def test_pooled_commands_get_auto_regions_per_command(rt: Runtime) -> None:
    result, seen = run(rt, "--mode", "pooled", "--auto-region", "--", "python", CANDIDATE, "do_bench", "timeit")
    assert result["worker"] and set(seen["measured"]) == {"do_bench", "timeit"}
    # Every entry point of a module the command imported is wrapped (and listed).
    assert len(result["auto_regions"]) == 5 and "triton.testing:do_bench_cudagraph" in result["auto_regions"]
    assert regions_around_timed_kernels(rt, result) == 2
    assert result["unprotected_timings"] == 0
    # The next command of the same context process did not ask: nothing is wrapped for it.
    after, seen = run(rt, "--mode", "pooled", "--", "python", CANDIDATE, "do_bench")
    assert after["worker"] == result["worker"] and after["auto_regions"] == [] and seen["measured"]
    assert after["unprotected_timings"] == 4  # counted for this command alone, in its context process


def test_a_patched_harness_taints_only_its_own_pooled_command(rt: Runtime) -> None:
    """Measurement integrity (docs/integrity.md): a candidate that replaces
    do_bench after import has its later regions flagged; the next command of
    the same context process starts untainted."""
    patched, seen = run(rt, "--mode", "pooled", "--auto-region", "--", "python", str(TENANTS / "patched_harness.py"))
    assert set(seen["after"]["flags"]) == {"patched_harness"} and seen["honest"]["clean"]
    after, _ = run(rt, "--mode", "pooled", "--auto-region", "--", "python", CANDIDATE, "do_bench")
    assert [r["integrity"]["flags"] for r in after["regions"]] == [{}], (patched["worker"], after["worker"])


REPLACES_DO_BENCH = """
import json, triton.testing
from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda
cuda = SimCuda()
real = triton.testing.do_bench
triton.testing.do_bench = lambda fn, **kwargs: 0.001
with region() as r:
    cuda.launch(1000, name="timed")
triton.testing.do_bench = real  # put back before the command ends
print(json.dumps(r.integrity))
"""


def test_a_framework_timer_replaced_without_auto_regions_taints_only_its_own_pooled_command(rt: Runtime) -> None:
    """The framework timers' check (tenant/framework_timers.py) runs in every
    region, auto-regions or not; what one pooled command found does not follow
    the context process into the next."""
    patched, seen = run(rt, "--mode", "pooled", "--", "python", "-c", REPLACES_DO_BENCH)
    assert set(seen["flags"]) == {"patched_harness"}, seen
    assert "triton.testing:do_bench" in seen["flags"]["patched_harness"]["reason"]
    honest = REPLACES_DO_BENCH.replace("triton.testing.do_bench = lambda fn, **kwargs: 0.001", "")
    after, seen = run(rt, "--mode", "pooled", "--", "python", "-c", honest)
    assert after["worker"] == patched["worker"]
    assert seen is not None and seen["flags"] == {}, seen


def test_forked_commands_get_auto_regions_per_command(rt: Runtime) -> None:
    wait_until(lambda: rt.client().call("status")["gpus"][0]["zygote"].get("state") == "ready", 60, "the zygote")
    result, seen = run(rt, "--mode", "forked", "--auto-region", "--", "python", CANDIDATE, "do_bench", "timeit")
    assert result["mode"] == "forked" and set(seen["measured"]) == {"do_bench", "timeit"}
    assert "triton.testing:do_bench" in result["auto_regions"]
    assert regions_around_timed_kernels(rt, result) == 2
    assert result["unprotected_timings"] == 0
    # A child forked for a command that did not ask: nothing is wrapped for it.
    after, seen = run(rt, "--mode", "forked", "--", "python", CANDIDATE, "do_bench")
    assert after["auto_regions"] == [] and seen["measured"] and after["unprotected_timings"] == 4


def test_a_bad_entry_point_is_refused(rt: Runtime) -> None:
    done = subprocess.run([*command("krex"), "run", "--auto-region-entry", "no-colon", "--", "true"],
                          env=rt.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 125
    assert done.stderr.strip().splitlines() == [
        "krex: auto-region entry 'no-colon' is not module:function or module:Class.method [bad_request]"]


def test_the_config_default_and_the_submit_decide(tmp_path: Any) -> None:
    on = RegionSection(auto_region=True, auto_region_entries=("suite:measure",))
    report = tmp_path / "r"
    env = auto_regions.command_env(SubmitBody(argv=["x"], env={"KREX_AUTO_REGION": "1"}), RegionSection(), report)
    assert "KREX_AUTO_REGION" not in env  # the submit's field decides, not a stray variable
    env = auto_regions.command_env(SubmitBody(argv=["x"], auto_region_entries=["a:b"]), on, report)
    assert env["KREX_AUTO_REGION"] == "1" and env["KREX_AUTO_REGION_ENTRIES"] == "suite:measure,a:b"
    assert "KREX_AUTO_REGION" not in auto_regions.command_env(SubmitBody(argv=["x"], auto_region=False), on, report)
    with pytest.raises(ConfigError, match=r"regions.auto_region_entries: auto-region entry 'x.y' is not"):
        validate(Config(regions=RegionSection(auto_region_entries=("x.y",))))



def test_the_start_up_hook_names_the_variables_the_runtime_sets() -> None:
    # The hook imports nothing but os and sys, so it spells the names itself.
    from krex_runtime.tenant import auto_region, env

    assert (auto_region.ENABLED, auto_region.ENTRIES, auto_region.REPORT) == (
        env.AUTO_REGION, env.AUTO_REGION_ENTRIES, env.AUTO_REGION_REPORT)
    assert auto_region.parse_entry("pkg.mod:Cls.meth") == ("pkg.mod", ["Cls", "meth"])


def test_the_config_turns_them_on_for_every_command_that_does_not_say_no(make_runtime: Any) -> None:
    rt = krex_runtime(make_runtime, auto_region=True, auto_region_entries=["suite_helper:measure"])
    result, _ = run(rt, "--", sys.executable, CANDIDATE, "suite")
    assert result["auto_regions"] == ["suite_helper:measure"] and result["unprotected_timings"] == 0
    assert len(result["regions"]) == 1 and result["regions"][0]["verdict"] == "verified"
    result, _ = run(rt, "--no-auto-region", "--", sys.executable, CANDIDATE, "suite")
    assert result["auto_regions"] == [] and result["unprotected_timings"] == 3 and result["regions"] == []
