"""Page-locked host memory in forwarded mode (docs/modes.md, "Copies from
page-locked memory"): allocations come from the command's pinned arena, which
its server registers, so a copy from them is one copy from the server's
mapping of the same pages; memory the program registers itself stays staged,
and a staged copy inside a region is flagged in its integrity record. On the
simulated driver, whose copies cost bytes over its bandwidth from pinned
memory and twice that from pageable memory (native/include/krex_simcuda.h)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from region_checks import check_nothing_left
from runtime_helpers import REPO, module_runtime, regions_config

from krex_runtime.commands.forwarded import forward_ring
from krex_runtime.node import native_build
from krex_runtime.sim.execution_log import read_execution_log
from krex_runtime.testing.local_runtime import Runtime, wait_until

TESTS = native_build.native_dir() / "tests"
SERVERS = 2
PAGE = 4096
PINNED, REGISTERED, PAGEABLE = 18 * PAGE, 19 * PAGE, 20 * PAGE  # forward_pinned.c's sizes for `costs`
STAGED_NOTE = "(a staged copy, not the copy asked for)"


@pytest.fixture(scope="module")
def program(native_built: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "forward-tests"], check=True)
    return TESTS / "forward_pinned"


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, program: Path) -> Iterator[Runtime]:
    forward = f'\n[forward]\nservers_per_gpu = {SERVERS}\nfallback = "fail"\nclean_timeout_s = 5\npinned_mib = 64\n'
    for runtime in module_runtime(tmp_path_factory.mktemp("pinned") / "rt", sim=1, policy="krex", slots=16,
                                  extra_config=regions_config() + forward):
        wait_until(lambda r=runtime: len(_servers(r)) == SERVERS, 60, "the context servers to be ready")
        yield runtime


def _servers(rt: Runtime) -> list[psutil.Process]:
    assert rt.proc is not None
    return [p for p in psutil.Process(rt.proc.pid).children() if p.name() == "krex-ctxd"]


def run(rt: Runtime, mode: str, *argv: str) -> dict[str, Any]:
    done = rt.krex("run", "--mode", mode, "--json", "--timeout", "60", "--", *argv)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_pinned_memory_written_and_copied_is_intact_and_async_copies_stay_async(rt: Runtime, program: Path) -> None:
    process = run(rt, "process", str(program), "data")
    forwarded = run(rt, "forwarded", str(program), "data")
    for result in (process, forwarded):
        assert result["state"] == "finished", result
        assert result["stdout"] == ("pinned intact: sync, offsets, async (stream busy at return: yes), reused range "
                                    "zeroed: yes\n"), result
    # Every copy of the arena's memory was the one asked for: nothing staged.
    assert STAGED_NOTE not in forwarded["reason"] and "krex forward" not in forwarded["stderr"], forwarded


def _copies(rt: Runtime, sizes: tuple[int, ...]) -> dict[int, list[Any]]:
    records = [r for r in read_execution_log(rt.root / "sim.log") if r.name.startswith("memcpy")]
    return {size: [r for r in records if r.bytes == size] for size in sizes}


def test_forwarded_pinned_copies_cost_what_process_mode_ones_cost_and_staged_ones_do_not(
        rt: Runtime, program: Path) -> None:
    sizes = (PINNED, REGISTERED, PAGEABLE)
    before = {size: len(v) for size, v in _copies(rt, sizes).items()}
    assert run(rt, "process", str(program), "costs")["state"] == "finished"
    forwarded = run(rt, "forwarded", str(program), "costs")
    assert forwarded["state"] == "finished", forwarded
    after = _copies(rt, sizes)
    process_run = {size: after[size][before[size]] for size in sizes}
    forwarded_run = {size: after[size][before[size] + 1] for size in sizes}
    assert all(len(after[size]) == before[size] + 2 for size in sizes), after
    # Process mode: pinned and registered memory cost one DMA, pageable twice that.
    assert process_run[PINNED].name == process_run[REGISTERED].name == "memcpy"
    assert process_run[PAGEABLE].name == "memcpy pageable"
    assert process_run[PAGEABLE].solo_ns == 2 * process_run[PINNED].solo_ns * PAGEABLE // PINNED
    # Forwarded: the arena's copy costs what it cost in process mode...
    assert forwarded_run[PINNED].name == "memcpy"
    assert forwarded_run[PINNED].solo_ns == process_run[PINNED].solo_ns
    # ...the program's registered memory is staged: it costs what pageable memory costs, not a DMA.
    assert forwarded_run[REGISTERED].name == "memcpy pageable"
    assert forwarded_run[REGISTERED].solo_ns == 2 * process_run[REGISTERED].solo_ns
    assert "1 copy from or to page-locked host memory" in forwarded["reason"] and STAGED_NOTE in forwarded["reason"]


def test_a_staged_copy_timed_in_a_region_is_flagged_in_its_integrity_record(rt: Runtime, program: Path) -> None:
    process = run(rt, "process", str(program), "region")
    forwarded = run(rt, "forwarded", str(program), "region")
    assert process["state"] == forwarded["state"] == "finished", (process, forwarded)
    [plain] = [r["integrity"] for r in process["regions"]]
    [staged] = [r["integrity"] for r in forwarded["regions"]]
    assert "staged_copy" not in plain["flags"], plain
    # 3 copies of registered memory were staged; the 2 of the arena were not.
    assert staged["flags"]["staged_copy"]["count"] == 3, staged
    assert "forwarded mode's staging" in staged["flags"]["staged_copy"]["reason"]
    assert not staged["clean"] and "staged_copy 3" in staged["summary"], staged


def test_a_copy_outside_the_registered_ranges_is_refused_and_a_range_outside_the_arena_fails_the_segment(
        rt: Runtime, program: Path) -> None:
    result = run(rt, "forwarded", str(program), "bad-offset")
    out = result["stdout"].splitlines()
    invalid = 1  # CUDA_ERROR_INVALID_VALUE: refused, the driver never sees it
    assert out[:4] == [f"beyond {invalid}", f"wrapping {invalid}", f"not owned {invalid}", "inside 0"], result
    assert out[4] == "register outside -1", result  # no reply: the server stopped serving
    assert "malformed request: a pinned range of 4096 bytes at 1099511627776" in result["reason"], result
    assert result["state"] == "failed", result
    wait_until(lambda: len(_servers(rt)) == SERVERS, 30, "the server to be replaced")
    check_nothing_left(rt.run_dir)


def test_an_arena_truncated_under_its_server_fails_the_command_not_the_server(rt: Runtime, program: Path) -> None:
    result = run(rt, "forwarded", str(program), "truncate")
    assert result["state"] == "failed", result
    assert "its pinned arena was truncated under it" in result["reason"], result
    assert result["stdout"].endswith("next 46\n"), result  # CUDA_ERROR_DEVICE_UNAVAILABLE from then on
    wait_until(lambda: len(_servers(rt)) == SERVERS, 30, "the server to be replaced")
    check_nothing_left(rt.run_dir)


def test_a_killed_tenant_leaves_no_arena_and_its_server_serves_the_next(rt: Runtime, program: Path) -> None:
    done = rt.krex("submit", "--mode", "forwarded", "--timeout", "60", "--", str(program), "hold")
    command_id = done.stdout.strip()
    output = rt.run_dir / "output" / f"{command_id}.stdout"
    wait_until(lambda: output.exists() and "holding" in output.read_text(), 30, "the tenant to hold pinned memory")
    prefix = forward_ring.segment_prefix(rt.run_dir)
    [arena] = [p for p in forward_ring.SHM_DIR.glob(prefix + "*") if p.name.endswith(forward_ring.PINNED_SUFFIX)]
    [server] = [s for s in _servers(rt) if any(m.path == str(arena) for m in s.memory_maps())]
    client = next(p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:2] == [
        str(program), "hold"])
    client.kill()
    result = json.loads(rt.krex("wait", "--json", command_id).stdout)
    assert result["signal"] == 9, result
    # Unregistered, unmapped and removed: the server maps no file of the command's.
    wait_until(lambda: not any("krex-fwd-" in m.path for m in server.memory_maps()), 30, "the server to clean up")
    assert not arena.exists() and not list(forward_ring.SHM_DIR.glob(prefix + "*"))
    assert server.is_running()
    again = run(rt, "forwarded", str(program), "data")
    assert again["state"] == "finished", again
    check_nothing_left(rt.run_dir)


def test_without_an_arena_pinned_allocations_are_staged_and_flagged(make_runtime: Any, program: Path) -> None:
    forward = '\n[forward]\nservers_per_gpu = 1\nfallback = "fail"\nclean_timeout_s = 5\npinned_mib = 0\n'
    rt = make_runtime(policy="krex", sim=1, slots=2, extra_config=regions_config() + forward)
    wait_until(lambda: len(_servers(rt)) == 1, 60, "the context server to be ready")
    assert not list(forward_ring.SHM_DIR.glob(forward_ring.segment_prefix(rt.run_dir) + "*"))
    data = run(rt, "forwarded", str(program), "data")
    # The data is right, but a staged copy to the host waits for its stream: the host was blocked.
    assert data["state"] == "finished", data
    assert data["stdout"].startswith("pinned intact: sync, offsets, async (stream busy at return: no)"), data
    costs = run(rt, "forwarded", str(program), "costs")
    assert costs["state"] == "finished", costs
    # The allocation is ordinary memory now: its copy is staged too, beside the registered one's.
    assert costs["reason"].startswith("2 copies from or to page-locked host memory") and STAGED_NOTE in costs["reason"]
    forwarded_copy = _copies(rt, (PINNED,))[PINNED][-1]
    assert forwarded_copy.name == "memcpy pageable", forwarded_copy


def test_the_benchmark_of_pinned_copies_runs_on_the_simulator(native_built: Path) -> None:
    # benchmarks/forward_pinned.py --sim, tiny: its rows, not its figures.
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "forward_pinned.py"), "--sim", "--mib", "1",
                           "--copies", "3", "--commands", "1"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[2:4]] == ["pinned", "registered"], done.stdout
    assert lines[2].endswith("the one asked for (pinned arena)") and lines[3].endswith("staged (registered by the "
                                                                                       "program)"), done.stdout
    assert set(json.loads(lines[-1])["results"]) == {"process", "forwarded"}
