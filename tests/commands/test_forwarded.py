"""Forwarded mode end to end (docs/modes.md, "Forwarded mode"): a real runtime
on the simulated driver, C tenants whose driver calls go to the GPU's context
servers, and the failures of either side."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from region_checks import (
    check_exclusive,
    check_fifo,
    check_no_submissions_while_held,
    check_nothing_left,
    check_one_holder_per_gpu,
    regions_of,
)
from runtime_helpers import (
    NO_WATCHDOG,
    PY,
    REPO,
    TENANTS,
    module_runtime,
    region_results,
    regions_config,
    tenant_processes,
    trace_events,
)

from krex_runtime.commands.forwarded import forward_ring
from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime, wait_until

TESTS = native_build.native_dir() / "tests"
SERVERS = 4


@pytest.fixture(scope="module")
def tools(native_built: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "intercept-tests", "forward-tests", "cudart-tests"],
                   check=True)
    return TESTS


def _runtime(folder: Path, fallback: str = "fail", servers: int = SERVERS) -> Iterator[Runtime]:
    forward = f'\n[forward]\nservers_per_gpu = {servers}\nfallback = "{fallback}"\nclean_timeout_s = 5\n'
    yield from module_runtime(folder, sim=1, policy="krex", slots=64, extra_config=regions_config() + forward)


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, tools: Path) -> Iterator[Runtime]:
    for runtime in _runtime(tmp_path_factory.mktemp("forwarded") / "rt"):
        wait_until(lambda rt=runtime: _idle_servers(rt) == SERVERS, 60, "the context servers to be ready")
        yield runtime


def _servers(rt: Runtime) -> list[psutil.Process]:
    """The runtime's context servers (krex-ctxd children of it)."""
    assert rt.proc is not None
    return [p for p in psutil.Process(rt.proc.pid).children() if p.name() == "krex-ctxd"]


def _idle_servers(rt: Runtime) -> int:
    return len(_servers(rt))


def run(rt: Runtime, mode: str, *argv: str, timeout_s: float | None = None) -> dict[str, Any]:
    limit = ["--timeout", str(timeout_s)] if timeout_s is not None else []
    done = rt.krex("run", "--mode", mode, "--json", *limit, "--", *argv)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def same_as_in_process_mode(rt: Runtime, program: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """`program work` run in process mode and forwarded: both finish, with the
    same output. Returns both runs' results."""
    process = run(rt, "process", str(program), "work")
    forwarded = run(rt, "forwarded", str(program), "work")
    assert process["state"] == "finished", process
    assert forwarded["state"] == "finished", forwarded
    assert forwarded["stdout"] == process["stdout"]
    return process, forwarded


def test_a_c_tenant_gets_the_same_results_as_in_process_mode(rt: Runtime, tools: Path) -> None:
    _, forwarded = same_as_in_process_mode(rt, tools / "forward_tenant")
    assert "kernels counted 26" in forwarded["stdout"]
    assert "async copy intact" in forwarded["stdout"] and "event timing covers the kernel" in forwarded["stdout"]
    assert "krex forward" not in forwarded["stderr"]


def test_threads_launch_paths_and_event_timings_are_seen_as_in_process_mode(rt: Runtime, tools: Path) -> None:
    linked = run(rt, "forwarded", str(tools / "linked_tenant"), "4", "50", "20000", "4")
    assert linked["state"] == "finished", linked
    assert linked["stdout"].splitlines()[-1] == "done 200"
    # Unprotected-timing detection and regions belong to the command: the
    # same count as in process mode (tests/integrity/test_unprotected_timings.py).
    timed = {mode: run(rt, mode, str(tools / "event_timing")) for mode in ("process", "forwarded")}
    assert timed["forwarded"]["state"] == "finished", timed["forwarded"]
    assert timed["forwarded"]["unprotected_timings"] == timed["process"]["unprotected_timings"] == 4


def test_a_cuda_runtime_program_gets_the_same_results_as_in_process_mode(rt: Runtime, tools: Path) -> None:
    # Process mode: forwarded mode's libcudart over the simulated driver
    # (the toolkit's cudart needs the driver's private tables, which the
    # simulator does not have); forwarded: the same library over the client.
    process, forwarded = same_as_in_process_mode(rt, tools / "cudart_tenant")
    out = forwarded["stdout"]
    assert "devices 1, device 0, runtime " in out and "memory yes, a name yes" in out
    assert "kernels counted 21" in out and "async copy intact" in out and "event timing covers the kernel" in out
    assert ("unregistered launch: cudaErrorInvalidDeviceFunction, peeked cudaErrorInvalidDeviceFunction, "
            "last cudaErrorInvalidDeviceFunction, then cudaSuccess") in out
    assert "after reset counted 1" in out and out.endswith("done\n")
    assert "krex" not in forwarded["stderr"]
    # Its event timings are the command's, as in process mode.
    assert forwarded["unprotected_timings"] == process["unprotected_timings"] > 0


def test_a_graph_captured_through_the_cuda_runtime_runs_forwarded_as_in_process_mode(rt: Runtime,
                                                                                    tools: Path) -> None:
    process = run(rt, "process", str(tools / "cudart_tenant"), "capture")
    forwarded = run(rt, "forwarded", str(tools / "cudart_tenant"), "capture")
    assert process["state"] == forwarded["state"] == "finished", (process, forwarded)
    assert forwarded["stdout"] == process["stdout"]
    assert forwarded["stdout"].endswith("replayed 3 times: counted 6, copy and memset intact\n")
    assert "krex" not in forwarded["stderr"] and "process mode" not in forwarded["reason"], forwarded


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the program is built by it)")
def test_a_program_built_by_nvcc_runs_forwarded_with_the_shared_cuda_runtime(rt: Runtime, tmp_path: Path) -> None:
    source = native_build.native_dir().parent / "tests" / "cudart_nvcc_tenant.cu"
    assert NVCC is not None
    shared, static = tmp_path / "shared", tmp_path / "static"
    # The shared one finds forwarded mode's libcudart through its run path in
    # process mode too (the simulator cannot serve the toolkit's).
    subprocess.run([NVCC, "-cudart", "shared", "-Xlinker", f"-rpath,{native_build.forwarding_client_dir()}",
                    "-o", str(shared), str(source)], check=True)
    subprocess.run([NVCC, "-o", str(static), str(source)], check=True)
    process = run(rt, "process", str(shared))
    forwarded = run(rt, "forwarded", str(shared))
    assert forwarded["state"] == "finished" and forwarded["exit_code"] == 0, forwarded
    assert forwarded["stdout"] == process["stdout"] == "counted 5, timing covers the kernels, last error cudaSuccess\n"
    assert "krex" not in forwarded["stderr"]
    carried = run(rt, "forwarded", str(static))
    assert "carries its own CUDA runtime (cudart linked statically" in carried["reason"], carried


def test_sixty_four_commands_at_once_on_four_servers(rt: Runtime, tools: Path) -> None:
    ids = []
    for _ in range(64):
        done = rt.krex("submit", "--mode", "forwarded", "--", str(tools / "linked_tenant"), "2", "10", "10000", "2")
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    for command_id in ids:
        done = rt.krex("wait", "--json", command_id)
        result = json.loads(done.stdout)
        assert result["state"] == "finished", result
        assert result["stdout"].splitlines()[-1] == "done 20"
    assert _idle_servers(rt) == SERVERS  # each served in turn and put back, none retired
    check_nothing_left(rt.run_dir)
    # This runtime's (other runtimes of the machine may hold segments of their own).
    left = [p for p in Path("/dev/shm").glob("krex-fwd-*") if any(p.name.startswith(f"krex-fwd-{i}-") for i in ids)]
    assert not left, "a command's segment was left behind"


def test_regions_of_forwarded_tenants_keep_every_invariant(rt: Runtime, tools: Path) -> None:
    start = len(regions_of(rt.trace_path)[1])
    ids = []
    for i in range(8):
        # Half of them Python tenants on the driver, half C tenants on the CUDA runtime.
        argv = [PY, str(TENANTS / "regions.py"), "--regions", "3", "--kernel-us", "300", "--repeats", "3",
                "--pause-ms", "30", "--noise", str(i % 4), "--noise-us", "400"]
        if i % 2:
            argv = [str(tools / "cudart_tenant"), "regions", "3", "300", "3", str(i % 4)]
        done = rt.krex("submit", "--mode", "forwarded", "--", *argv)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    for command_id in ids:
        result = json.loads(rt.krex("wait", "--json", command_id).stdout)
        assert result["state"] == "finished", result
        assert [r.get("error") for r in region_results(result["stdout"])] == [None] * 3, result
    check_nothing_left(rt.run_dir)
    events, held = regions_of(rt.trace_path)
    mine = held[start:]
    assert len(mine) == 24
    check_one_holder_per_gpu(events)
    check_fifo(events)
    check_no_submissions_while_held(mine)
    # The execution log attributes a server's work to the command it serves.
    assert check_exclusive(events, mine, rt.root / "sim.log") > 24 * 3
    verdicts = {e["region"]: e for e in events if e["type"] == "region_released"}
    assert {verdicts[h.region]["verdict"] for h in mine} == {"verified"}, [
        verdicts[h.region]["verdict_reasons"] for h in mine if verdicts[h.region]["verdict"] != "verified"][:3]


# --- failures -------------------------------------------------------------------------


def _waiting(rt: Runtime, tools: Path, kernel_ms: int, timeout_s: float = 60) -> str:
    done = rt.krex("submit", "--mode", "forwarded", "--timeout", str(timeout_s), "--",
                   str(tools / "forward_tenant"), "wait", str(kernel_ms))
    command_id = done.stdout.strip()
    wait_until(lambda: "waiting" in _output(rt, command_id), 30, "the tenant to wait on its kernel")
    return command_id


def _output(rt: Runtime, command_id: str) -> str:
    path = rt.run_dir / "output" / f"{command_id}.stdout"
    return path.read_text() if path.exists() else ""


def _server_of(rt: Runtime) -> psutil.Process:
    """The one server serving now: the one with a command's segment mapped."""
    for p in _servers(rt):
        try:
            if any("krex-fwd-" in m.path for m in p.memory_maps()):
                return p
        except psutil.Error:
            continue
    raise AssertionError("no context server is serving")


def _result(rt: Runtime, command_id: str) -> dict[str, Any]:
    return json.loads(rt.krex("wait", "--json", command_id).stdout)


def test_a_server_that_crashes_mid_call_fails_its_command_and_is_replaced(rt: Runtime, tools: Path) -> None:
    command_id = _waiting(rt, tools, 5000)
    server = _server_of(rt)
    server.kill()
    result = _result(rt, command_id)
    assert result["state"] == "failed", result
    assert "died" in result["reason"] and "context server" in result["reason"], result
    assert "CUDA_ERROR_DEVICE_UNAVAILABLE" in result["stdout"]
    wait_until(lambda: _idle_servers(rt) == SERVERS and server.pid not in {p.pid for p in _servers(rt)}, 30,
               "the server to be replaced")
    check_nothing_left(rt.run_dir)


def test_a_server_that_hangs_ends_at_the_time_limit_and_is_retired(rt: Runtime, tools: Path) -> None:
    command_id = _waiting(rt, tools, 5000, timeout_s=3)
    server = _server_of(rt)
    server.suspend()  # hangs: neither answers nor dies
    result = _result(rt, command_id)
    assert result["state"] == "timeout", result
    wait_until(lambda: not psutil.pid_exists(server.pid) or server.status() == psutil.STATUS_ZOMBIE, 30,
               "the hung server to be ended")
    wait_until(lambda: _idle_servers(rt) == SERVERS, 30, "the server to be replaced")
    check_nothing_left(rt.run_dir)


def test_a_client_that_dies_mid_call_leaves_its_server_clean(rt: Runtime, tools: Path) -> None:
    command_id = _waiting(rt, tools, 1500)
    server = _server_of(rt)
    client = next(p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:2] == [
        str(tools / "forward_tenant"), "wait"])
    client.kill()
    result = _result(rt, command_id)
    assert result["signal"] == signal.SIGKILL, result
    # The server finished the call, put its context back and serves the next command.
    wait_until(lambda: not any("krex-fwd-" in m.path for m in server.memory_maps()), 30, "the server to clean up")
    assert server.is_running()
    again = run(rt, "forwarded", str(tools / "forward_tenant"), "work")
    assert again["state"] == "finished", again
    check_nothing_left(rt.run_dir)


@pytest.mark.parametrize("what, said", [("oversized", "oversized request"), ("malformed", "malformed request")])
def test_a_bad_request_fails_its_command_and_retires_its_server(rt: Runtime, tools: Path, what: str, said: str) -> None:
    result = run(rt, "forwarded", str(tools / "forward_garbage"), what)
    assert result["state"] == "failed", result
    assert said in result["reason"] and "refused a request" in result["reason"], result
    assert said in result["stdout"]  # the command itself was told
    wait_until(lambda: _idle_servers(rt) == SERVERS, 30, "the server to be replaced")
    check_nothing_left(rt.run_dir)


def test_a_call_that_is_not_forwarded_is_named(rt: Runtime, tools: Path) -> None:
    result = run(rt, "forwarded", str(tools / "forward_tenant"), "unknown")
    assert result["state"] == "failed" and result["exit_code"] == 3, result
    assert "cuMemAllocManaged is not forwarded" in result["stderr"]
    assert "it called cuMemAllocManaged, which forwarded mode does not forward" in result["reason"], result


def test_a_capture_refuses_host_copies_and_graphs_not_given_and_one_left_open_is_ended(rt: Runtime,
                                                                                     tools: Path) -> None:
    wait_until(lambda: _idle_servers(rt) == SERVERS, 30, "the context servers to be idle")
    before = {p.pid for p in _servers(rt)}
    result = run(rt, "forwarded", str(tools / "forward_tenant"), "capture")
    assert result["state"] == "finished", result
    assert result["stdout"] == (
        "a host copy captured: CUDA_SUCCESS, the capture ends: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, graph none\n"
        "instantiate a graph not given: CUDA_ERROR_INVALID_HANDLE\n"
        "destroy an executable graph not given: CUDA_ERROR_INVALID_HANDLE\n"
        "launch one: CUDA_SUCCESS, then CUDA_ERROR_INVALID_HANDLE\n"
        "done\n"), result
    # The copy was sent without waiting: its refusal is told with the next reply.
    assert "failed on the context server with error 900" in result["stderr"], result
    # The server ended the capture left open, cleaned and serves on: none was retired.
    wait_until(lambda: _idle_servers(rt) == SERVERS, 30, "the context servers to be idle")
    assert {p.pid for p in _servers(rt)} == before
    check_nothing_left(rt.run_dir)


def test_a_cuda_runtime_call_forwarded_mode_does_not_implement_is_named(rt: Runtime, tools: Path) -> None:
    result = run(rt, "forwarded", str(tools / "cudart_tenant"), "unknown")
    assert result["state"] == "failed" and result["exit_code"] == 3, result
    assert result["stdout"] == "cudaMallocManaged: cudaErrorNotSupported\n"
    assert "krex forward: cudaMallocManaged is not forwarded" in result["stderr"]
    assert "it called cudaMallocManaged, which forwarded mode does not forward" in result["reason"], result


def test_a_program_that_carries_its_own_cuda_runtime_is_told_why(rt: Runtime, tools: Path) -> None:
    # A statically linked cudart first asks the driver for its private tables.
    result = run(rt, "forwarded", str(tools / "forward_tenant"), "export-table")
    assert result["exit_code"] == 3, result
    assert "carries its own CUDA runtime" in result["stderr"] and "nvcc -cudart shared" in result["stderr"]
    assert "carries its own CUDA runtime (cudart linked statically" in result["reason"], result
    assert "build it with `nvcc -cudart shared`, or run it in process mode" in result["reason"]


def test_a_call_that_is_not_forwarded_falls_back_to_process_mode(tmp_path: Path, tools: Path) -> None:
    for runtime in _runtime(tmp_path / "rt", fallback="process", servers=1):
        wait_until(lambda rt=runtime: _idle_servers(rt) == 1, 60, "the context server to be ready")
        result = run(runtime, "forwarded", str(tools / "forward_tenant"), "unknown")
        # The simulator does not serve managed memory either: what counts is
        # that the second run was a process command that reached the driver.
        assert "running the command again in process mode" in result["stderr"], result
        assert result["stdout"].strip() == f"cuMemAllocManaged: {801}", result  # CUDA_ERROR_NOT_SUPPORTED
        assert "krex forward" not in result["stderr"].split("process mode", 1)[1]
        # A CUDA runtime program: in process mode (the simulator has no
        # toolkit runtime) it meets forwarded mode's libcudart over the driver.
        result = run(runtime, "forwarded", str(tools / "cudart_tenant"), "unknown")
        assert "running the command again in process mode" in result["stderr"], result
        assert "krex cudart: cudaMallocManaged is not implemented" in result["stderr"], result
        assert result["stdout"].strip() == "cudaMallocManaged: cudaErrorNotSupported", result


def test_forwarded_mode_needs_servers(make_runtime: Any) -> None:
    rt = make_runtime(policy="krex", sim=1, slots=2, extra_config=regions_config())
    done = rt.krex("run", "--mode", "forwarded", "--", "/bin/true")
    assert done.returncode != 0
    assert "forward.servers_per_gpu" in done.stderr



def test_a_killed_runtimes_segments_are_removed_by_its_restart(make_runtime: Any, tools: Path) -> None:
    """A runtime killed with a forwarded command running leaves its segment in
    /dev/shm; the next start on the same run folder removes it (and only its own)."""
    forward = "\n[forward]\nservers_per_gpu = 1\nclean_timeout_s = 5\n"
    rt = make_runtime(policy="krex", sim=1, slots=2, extra_config=regions_config() + forward,
                      runtime_extra=NO_WATCHDOG)
    wait_until(lambda: _idle_servers(rt) == 1, 60, "the context server to be ready")
    prefix = forward_ring.segment_prefix(rt.run_dir)
    _waiting(rt, tools, kernel_ms=60_000)
    left = sorted(forward_ring.SHM_DIR.glob(prefix + "*"))
    assert [p.name.endswith(forward_ring.PINNED_SUFFIX) for p in left] == [False, True]  # its segment and arena
    rt.stop(signal.SIGKILL)
    assert all(p.exists() for p in left)  # nobody removed them...
    rt.start()  # ...until the restart's recovery
    started = trace_events(rt, "runtime_started")[-1]
    assert all(f"removed forwarding segment {p.name}" in started["recovered"] for p in left)
    assert not any(p.exists() for p in left)
    assert rt.proc is not None
    runtime = rt.proc.pid  # its own context server is no orphan
    wait_until(lambda: [p for p in tenant_processes(rt.run_dir) if p.ppid() != runtime] == [], 30,
               "the orphaned command and server to end")
