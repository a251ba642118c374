"""The fault matrix: each fault a runtime must survive without leaving the node
wedged, the test that checks its clear outcome, and how nothing is left.

Every runtime a test starts with `make_runtime` is checked by the fixture:
while idle at the end of the test nothing is held back (gates open, nobody
parked, nothing frozen or stopped) and its descriptors did not grow; after a
clean stop nothing is left (processes, cgroups, gates, sockets, held locks,
shared memory). Faults already covered elsewhere are listed with their test;
the faults below run under policy krex while a region is held and the other
tenants are frozen, the state a fault must not leave behind.
"""

from __future__ import annotations

import inspect
import json
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from region_checks import check_nothing_left
from runtime_helpers import (
    PY,
    RECOVERY_BOUND_S,
    TENANTS,
    busy,
    check_vendor,
    command_pid,
    finish,
    frozen_cgroups,
    gpu_state,
    krex_runtime,
    load_test_file,
    region_results,
    trace_events,
    wait_ready,
)

from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.regions.freezer import CgroupV2Freezer, Target
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

# fault -> the tests that provoke it and check its outcome (paths under tests/).
MATRIX = {
    "tenant SIGKILLed inside a region": ["regions/test_regions.py::test_sigkill_of_the_holder"],
    "tenant hanging in a region past the hold limit": ["regions/test_regions.py::test_holder_over_the_hold_limit"],
    "tenant killed while waiting for a region": ["regions/test_regions.py::test_sigkill_of_a_waiting_tenant"],
    "tenant hanging in a driver call (never drains)": ["regions/test_regions.py::test_a_tenant_that_never_drains"],
    "tenant already stopped (SIGSTOP) at an entry": ["regions/test_regions.py::test_a_tenant_that_was_already_stopped"],
    "command timeout": ["commands/test_commands.py::test_timeout_kills_whole_tree",
                        "regions/test_fault_matrix.py::test_fault_in_a_region[timeout-nvidia]"],
    "cancel of a running tree": ["commands/test_commands.py::test_cancel_kills_whole_tree",
                                 "regions/test_fault_matrix.py::test_fault_in_a_region[cancel-nvidia]",
                                 "regions/test_fault_matrix.py::test_fault_in_a_region[cancel-amd]"],
    "main process exits with a child alive": [
        "hostile/test_command_lifetime.py::test_a_command_ends_with_its_main_process_in_every_mode",
    ],
    "requester forks and exits, its child keeps the region socket": [
        "hostile/test_command_lifetime.py::test_a_region_is_released_when_its_requester_dies_though_its_child_keeps_the_socket",
        "regions/test_fault_matrix.py::test_fault_in_a_region[requester_dies-nvidia]",
    ],
    "output disk full": ["hostile/test_full_disk.py::test_a_full_output_disk_loses_output_loudly_and_blocks_nothing"],
    "runtime SIGKILLed with frozen tenants, then restarted": ["regions/test_regions.py::test_sigkill_of_the_runtime_then_restart"],
    "runtime SIGKILLed with frozen tenants, not restarted (watchdog)": [
        "hostile/test_watchdog.py::test_the_watchdog_thaws_and_cleans_up_after_a_sigkilled_runtime",
    ],
    "runtime SIGTERM with work in flight": [
        "commands/test_commands.py::test_sigterm_leaves_no_process_behind",
        "regions/test_fault_matrix.py::test_fault_in_a_region[sigterm-nvidia]",
        "regions/test_fault_matrix.py::test_fault_in_a_region[sigterm-amd]",
        "hostile/test_startup_shutdown.py::test_sigterm_with_canaries_on_three_gpus_leaves_nothing",
    ],
    "start-up failure after resources were made": [
        "hostile/test_startup_shutdown.py::test_an_unwritable_trace_path_is_one_line_and_leaves_nothing",
        "hostile/test_startup_shutdown.py::test_a_region_channel_that_cannot_listen_is_one_line_and_leaves_nothing",
    ],
    "gate mapping still exported at shutdown": ["hostile/test_gate_detach.py::test_a_gate_with_a_view_still_exported_detaches_without_raising"],
    "read-only request flood": ["hostile/test_flood.py::test_a_snapshot_flood_does_not_stall_status_heartbeat_or_the_hold_limit"],
    "idle region-channel connections of one tenant": [
        "hostile/test_region_channel_denial.py::test_idle_connections_of_one_tenant_do_not_deny_another_its_region",
    ],
    "a tenant's cgroup vanishing during an entry": ["hostile/test_vanishing_cgroup.py::test_regions_entered_while_other_tenants_end_never_fail"],
    "context process killed from outside": ["commands/test_pool.py::test_context_process_killed_from_outside_is_replaced"],
    "zygote dies with a command": ["commands/test_forked.py::test_a_zygote_that_dies_is_replaced_and_its_command_fails"],
    "malformed control message": ["wire/test_protocol.py::test_bad_message_gets_error_reply", "wire/test_protocol.py::test_fuzzing_keeps_the_service_up"],
    "broken config file": ["node/test_config.py::test_runtime_reports_a_broken_config_in_one_line"],
}
# Fixtures whose runtimes conftest.py checks for leftovers (idle and after the stop).
CHECKED_FIXTURES = {"make_runtime", "runtime", "modes_runtime"}
# How a test that starts no runtime of the fixture checks for leftovers itself.
SELF_CHECKS = ("hygiene.leftovers", "check_nothing_left", "_maps(")


def _test_function(node: str):
    path, _, name = node.partition(".py::")
    return getattr(load_test_file(f"{path}.py"), name.split("[")[0], None)


def test_the_matrix_covers_at_least_fifteen_kinds() -> None:
    assert len(MATRIX) >= 15


@pytest.mark.parametrize("fault", sorted(MATRIX))
def test_every_fault_has_its_test_and_ends_checked_for_leftovers(fault: str) -> None:
    for node in MATRIX[fault]:
        function = _test_function(node)
        assert callable(function), f"{fault}: {node} does not exist"
        fixtures = set(inspect.signature(function).parameters)
        assert fixtures & CHECKED_FIXTURES or any(check in inspect.getsource(function) for check in SELF_CHECKS), (
            f"{fault}: {node} leaves what it starts unchecked (use make_runtime, or check hygiene.leftovers)"
        )


def _holding_with_frozen_others(rt: Runtime, *argv: str) -> tuple[str, list[str]]:
    """Two busy tenants, then a command (argv) that enters a region and holds it
    while the two are frozen; returns (its id, the busy ids)."""
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    done = rt.krex("submit", *argv)
    assert done.returncode == 0, done.stderr
    holder = done.stdout.strip()
    root = _slice(rt)
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None and len(frozen_cgroups(root)) == 2, 60,
               "the region held with the others frozen")
    return holder, others


def _slice(rt: Runtime) -> Path:
    with rt.client() as c:
        return Path(c.call("status")["cgroups"])


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


HOLD_FOREVER = [PY, str(TENANTS / "regions.py"), "--regions", "1", "--hold-s", "1000"]


# Each fault on the simulated NVIDIA GPU; on the AMD one (HIP tenants) those
# that end frozen HIP tenants (the requester's death is the region channel's,
# whatever the vendor, and a timeout ends the tree as a cancel does).
FAULTS = [("timeout", "nvidia"), ("cancel", "nvidia"), ("sigterm", "nvidia"), ("requester_dies", "nvidia"),
          ("cancel", "amd"), ("sigterm", "amd")]


@pytest.mark.parametrize("fault, vendor", FAULTS)
def test_fault_in_a_region(make_runtime, fault: str, vendor: str) -> None:
    rt = krex_runtime(make_runtime, vendor=vendor)  # hold limit 60 s: the fault, not the limit, ends the region
    if fault == "requester_dies":
        _requester_dies(rt)
        return
    timeout = ["--timeout", "4"] if fault == "timeout" else []
    # A tree: the holder, and a child that would outlive it if only the holder were signalled.
    tree = ["bash", "-c", f"sleep 1000 & exec {' '.join(HOLD_FOREVER)}"]
    holder, others = _holding_with_frozen_others(rt, *timeout, "--", *tree)
    check_vendor(rt, vendor, holder, *others)
    pids = [p.pid for p in _tree(command_pid(rt, holder))]
    assert len(pids) == 2

    if fault == "sigterm":
        assert rt.stop(signal.SIGTERM) == 0
        events = read_trace(rt.trace_path).events
        ends = {e["id"]: e["state"] for e in events if e["type"] == "command_finished"}
        assert ends == {holder: "cancelled", others[0]: "cancelled", others[1]: "cancelled"}
        assert events[-1]["type"] == "runtime_stopped"
        assert not any(hygiene.alive(p) for p in pids)
        assert hygiene.leftovers(rt.run_dir, rt.lock_dir, hygiene.baseline()) == []
        return

    if fault == "cancel":
        assert rt.krex("cancel", holder).returncode == 0
    result = json.loads(rt.krex("wait", "--json", holder).stdout)
    assert result["state"] == {"timeout": "timeout", "cancel": "cancelled"}[fault]
    assert trace_events(rt, "region_released")[-1]["reason"] == "tenant disconnected"
    wait_until(lambda: not any(hygiene.alive(p) for p in pids), RECOVERY_BOUND_S, "the whole tree to end")
    wait_until(lambda: not hygiene.held_back(rt.run_dir), RECOVERY_BOUND_S, "the others thawed")
    check_nothing_left(rt.run_dir)
    # The node serves regions again.
    done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "1")
    assert done.returncode == 0 and "times_ms" in region_results(done.stdout)[0], done.stderr
    finish(rt, *others)


def _requester_dies(rt: Runtime) -> None:
    """The holder forks a child that keeps the region socket, then exits: the
    region goes with its requester, and the command runs on."""
    go = rt.root / "requester-exits"
    tree = ["bash", "-c", f"{PY} {TENANTS / 'fork_holder.py'} {go}; sleep 1000"]
    holder, others = _holding_with_frozen_others(rt, "--", *tree)
    go.touch()
    released = wait_until(lambda: trace_events(rt, "region_released"), 30, "the region to go with its requester")
    assert released[-1]["reason"].startswith("its requester (pid ") and released[-1]["reason"].endswith(") died")
    wait_until(lambda: not hygiene.held_back(rt.run_dir), RECOVERY_BOUND_S, "the others thawed")
    check_nothing_left(rt.run_dir)
    assert rt.krex("cancel", holder).returncode == 0
    finish(rt, *others)


def test_hygiene_sees_what_a_killed_runtime_leaves(make_runtime) -> None:
    """The checks above are only as good as what they can see: a runtime
    SIGKILLed while a region is held leaves all of it, until its restart
    (without the watchdog, which would undo it at once)."""
    rt = krex_runtime(make_runtime, watchdog=False)
    _holding_with_frozen_others(rt, "--", *HOLD_FOREVER)
    assert rt.proc is not None
    fds_at_region = hygiene.open_fds(rt.proc.pid)
    assert hygiene.grown_fds(rt.proc.pid, {}) != [] and hygiene.grown_fds(rt.proc.pid, fds_at_region) == []
    rt.stop(signal.SIGKILL)
    held = hygiene.held_back(rt.run_dir)
    assert "gpu0.gate is closed" in held and sum(" is frozen" in line for line in held) == 2
    left = "\n".join(hygiene.leftovers(rt.run_dir, rt.lock_dir, hygiene.baseline()))
    # The frozen busy tenants cannot leave; the holder may end on its own once
    # its region's connection is gone, so it is not counted on here.
    for what in ("busy.py", "cgroup v2 slice", "gpu0.gate", "control.sock", "region.sock"):
        assert what in left, f"{what} not seen in:\n{left}"
    rt.start()
    wait_until(lambda: not hygiene.krex_processes(rt.run_dir), RECOVERY_BOUND_S, "the old tenants to end")
    assert hygiene.held_back(rt.run_dir) == []


def test_thaw_reaches_every_tenant_when_one_fails(tmp_path: Path) -> None:
    """Found by the soak: a thaw that failed on one tenant's cgroup (being removed:
    ENODEV) left every later tenant of the region frozen for good."""
    cgroup_slice = CgroupSlice.open(tmp_path / "run")
    if cgroup_slice is None:
        pytest.skip("cgroup v2 is not writable here")
    group = cgroup_slice.create("cmd-frozen")
    sleeper = subprocess.Popen(["sleep", "1000"])
    try:
        (group / "cgroup.procs").write_text(str(sleeper.pid))
        frozen = Target("frozen", sleeper.pid, group)
        freezer = CgroupV2Freezer()
        freezer.freeze([frozen])
        assert hygiene.is_frozen(group)
        broken = tmp_path / "broken"
        (broken / "cgroup.freeze").mkdir(parents=True)  # writing to it fails
        with pytest.raises(IsADirectoryError):
            freezer.thaw([Target("broken", 0, broken), frozen])
        assert not hygiene.is_frozen(group)
    finally:
        sleeper.kill()
        sleeper.wait()
        cgroup_slice.remove()
