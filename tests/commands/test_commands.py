"""Commands through a real runtime and real `krex` CLI processes."""

from __future__ import annotations

import json
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from runtime_helpers import all_gone, tenant_processes, tree_pids

from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

PY = sys.executable


def test_commands_submitted_and_waited_for_in_parallel(runtime: Runtime) -> None:
    # Six CLI clients at once, 42 commands: every exit code 0-6 six times.
    def one(i: int) -> tuple[int, int, str, str]:
        code = i % 7
        sub = runtime.krex("submit", "--", "sh", "-c", f"echo out-{i}; echo err-{i} >&2; exit {code}")
        assert sub.returncode == 0, sub.stderr
        command_id = sub.stdout.strip()
        done = runtime.krex("wait", command_id)
        return i, done.returncode, done.stdout, done.stderr

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(one, range(42)))
    for i, rc, out, err in results:
        assert rc == i % 7
        assert out == f"out-{i}\n"
        assert err == f"err-{i}\n"
    totals = read_final_totals(runtime)
    assert totals["finished"] == 6 and totals["failed"] == 36  # exit 0: finished; 1-6: failed


def read_final_totals(runtime: Runtime) -> dict[str, int]:
    with runtime.client() as c:
        return c.call("status")["totals"]


def test_run_streams_output_and_reports_json(runtime: Runtime) -> None:
    script = "import sys,time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.05)\nsys.exit(5)"
    streamed = runtime.krex("run", "--gpu", "1", "--", PY, "-c", script)
    assert streamed.returncode == 5
    assert streamed.stdout.splitlines() == ["line 0", "line 1", "line 2"]
    done = runtime.krex("run", "--json", "--gpu", "1", "--", PY, "-c", script)
    assert done.returncode == 5
    record = json.loads(done.stdout)  # one document; the command's output is inside it
    assert record["stdout"] == "line 0\nline 1\nline 2\n" and record["exit_status"] == 5
    assert record["exit_code"] == 5 and record["gpu"] == 1 and record["state"] == "failed"
    assert record["started_at"] <= record["finished_at"]
    assert record["run_s"] >= 0 and record["queue_s"] >= 0


def test_command_sees_its_gpu_and_identity(runtime: Runtime) -> None:
    done = runtime.krex("run", "--gpu", "1", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES $KREX_GPU $KREX_TENANT_ID; echo $LD_PRELOAD")
    assert done.returncode == 0, done.stderr
    first, preload = done.stdout.splitlines()
    visible, gpu, tenant = first.split()
    assert visible == "1" and gpu == "1" and int(tenant) >= 1
    assert preload.endswith("libkrex.so")


def test_signal_death_and_missing_program(runtime: Runtime) -> None:
    killed = runtime.krex("run", "--", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 128 + signal.SIGKILL
    missing = runtime.krex("run", "--", "/nonexistent/program")
    assert missing.returncode == 127
    assert "cannot start" in missing.stderr


def _sleeper_tree(pid_dir: Path) -> str:
    """A command whose child and setsid grandchild ignore SIGTERM and record their pids."""
    return (
        f"trap '' TERM; echo $$ > {pid_dir}/main; "
        f"(trap '' TERM; echo $BASHPID > {pid_dir}/child; sleep 1000) & "
        f"setsid bash -c 'trap \"\" TERM; echo $$ > {pid_dir}/grandchild; sleep 1000' & "
        "sleep 1000"
    )


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_timeout_kills_whole_tree(make_runtime, tmp_path: Path, cgroups: str) -> None:
    rt = make_runtime(cgroups=cgroups)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    done = rt.krex("run", "--timeout", "1", "--json", "--", "bash", "-c", _sleeper_tree(pid_dir))
    assert done.returncode == 124, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["state"] == "timeout"
    assert all_gone(tree_pids(pid_dir))


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_cancel_kills_whole_tree(make_runtime, tmp_path: Path, cgroups: str) -> None:
    rt = make_runtime(cgroups=cgroups)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    command_id = rt.krex("submit", "--", "bash", "-c", _sleeper_tree(pid_dir)).stdout.strip()
    wait_until(lambda: (pid_dir / "grandchild").exists(), what="the command tree to start")
    cancel = rt.krex("cancel", command_id)
    assert cancel.returncode == 0, cancel.stderr
    done = rt.krex("wait", "--json", command_id)
    assert json.loads(done.stdout)["state"] == "cancelled"
    assert all_gone(tree_pids(pid_dir))


def test_cancel_of_a_queued_command(make_runtime) -> None:
    rt = make_runtime(sim=1, policy="command")
    first = rt.krex("submit", "--", "sleep", "1000").stdout.strip()
    second = rt.krex("submit", "--", "echo", "never").stdout.strip()
    assert rt.krex("cancel", second).returncode == 0
    assert json.loads(rt.krex("wait", "--json", second).stdout)["state"] == "cancelled"
    rt.krex("cancel", first)
    assert json.loads(rt.krex("wait", "--json", first).stdout)["state"] == "cancelled"


def _intervals(trace_path: Path) -> dict[int, list[tuple[int, int]]]:
    """(start seq, end seq) of every command per GPU, from the trace alone."""
    starts: dict[str, tuple[int, int]] = {}
    per_gpu: dict[int, list[tuple[int, int]]] = {}
    for event in read_trace(trace_path).events:
        if event["type"] == "command_started":
            starts[event["id"]] = (event["gpu"], event["seq"])
        elif event["type"] == "command_finished" and event["id"] in starts:
            gpu, begin = starts.pop(event["id"])
            per_gpu.setdefault(gpu, []).append((begin, event["seq"]))
    return per_gpu


def _peak(intervals: list[tuple[int, int]]) -> int:
    points = sorted([(b, 1) for b, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = level = 0
    for _, step in points:
        level += step
        peak = max(peak, level)
    return peak


def _running(rt: Runtime) -> list[int]:
    with rt.client() as c:
        return [len(g["running"]) for g in c.call("status")["gpus"]]


def _submit_held(rt: Runtime, go: Path, n: int, running: int) -> list[str]:
    """n commands that run until `go` exists; returns once `running` of them have started."""
    hold = f"while [ ! -e {go} ]; do sleep 0.02; done"
    ids = [rt.krex("submit", "--", "sh", "-c", hold).stdout.strip() for _ in range(n)]
    wait_until(lambda: sum(_running(rt)) >= running, what="slots to fill")
    return ids


def test_command_policy_runs_one_per_gpu(make_runtime, tmp_path: Path) -> None:
    rt = make_runtime(sim=2, policy="command", slots=4)
    go = tmp_path / "go"
    ids = _submit_held(rt, go, 8, running=2)
    status = rt.client().call("status")
    assert [len(g["running"]) for g in status["gpus"]] == [1, 1]
    assert status["queued"] == 6
    go.touch()
    for command_id in ids:
        assert rt.krex("wait", command_id).returncode == 0
    rt.stop()
    intervals = _intervals(rt.trace_path)
    assert all(_peak(v) == 1 for v in intervals.values())
    assert sum(len(v) for v in intervals.values()) == 8


def test_ungated_policy_fills_the_slots(make_runtime, tmp_path: Path) -> None:
    rt = make_runtime(sim=1, policy="ungated", slots=3)
    go = tmp_path / "go"
    ids = _submit_held(rt, go, 7, running=3)
    status = rt.client().call("status")
    assert len(status["gpus"][0]["running"]) == 3 and status["queued"] == 4
    go.touch()
    for command_id in ids:
        assert rt.krex("wait", command_id).returncode == 0
    rt.stop()
    assert _peak(_intervals(rt.trace_path)[0]) == 3


def test_pinned_commands_keep_fifo_per_gpu(make_runtime, tmp_path: Path) -> None:
    rt = make_runtime(sim=2, policy="command")
    go = tmp_path / "go"
    hold = rt.krex("submit", "--gpu", "0", "--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done").stdout.strip()
    later = [rt.krex("submit", "--gpu", "0", "--", "true").stdout.strip() for _ in range(3)]
    free = rt.krex("run", "--json", "--", "true")
    assert json.loads(free.stdout)["gpu"] == 1  # not held back by the queue for GPU 0
    go.touch()
    for command_id in [hold, *later]:
        assert rt.krex("wait", command_id).returncode == 0
    rt.stop()
    starts = [e["id"] for e in read_trace(rt.trace_path).events if e["type"] == "command_started" and e["gpu"] == 0]
    assert starts == [hold, *later]


def test_pause_and_resume_admission(runtime: Runtime) -> None:
    assert runtime.krex("pause").returncode == 0
    command_id = runtime.krex("submit", "--", "true").stdout.strip()
    with runtime.client() as c:
        assert c.call("status")["queued"] == 1
    assert runtime.krex("resume").returncode == 0
    assert runtime.krex("wait", command_id).returncode == 0


def test_sigterm_leaves_no_process_behind(make_runtime, tmp_path: Path) -> None:
    rt = make_runtime()
    pid_dirs = []
    for i in range(3):
        d = tmp_path / f"pids{i}"
        d.mkdir()
        pid_dirs.append(d)
        rt.krex("submit", "--", "bash", "-c", _sleeper_tree(d))
    wait_until(lambda: all((d / "grandchild").exists() for d in pid_dirs), what="trees to start")
    assert rt.stop(signal.SIGTERM) == 0
    assert all(all_gone(tree_pids(d)) for d in pid_dirs)
    assert tenant_processes(rt.run_dir) == []
    assert not (rt.run_dir / "control.sock").exists()
    events = read_trace(rt.trace_path).events
    assert events[-1]["type"] == "runtime_stopped"
    assert sum(1 for e in events if e["type"] == "command_finished" and e["state"] == "cancelled") == 3


def test_no_runtime_gives_one_line(tmp_path: Path) -> None:
    import subprocess

    from krex_runtime.testing.local_runtime import command

    env = {**os.environ, "KREX_RUN_DIR": str(tmp_path / "nothing")}
    done = subprocess.run([*command("krex"), "status"], env=env, capture_output=True, text=True)
    assert done.returncode == 125
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no krex runtime" in done.stderr and "krex-runtime" in done.stderr


def test_second_runtime_on_the_same_gpus_refuses(make_runtime, tmp_path: Path) -> None:
    first = make_runtime("first")
    second = Runtime(tmp_path / "second", device=first.device)
    second.root.mkdir()
    second.write_config()
    second.config_path.write_text(second.config_path.read_text().replace(str(second.root / "locks"), str(first.root / "locks")))
    import subprocess

    from krex_runtime.testing.local_runtime import command

    done = subprocess.run(
        [*command("krex-runtime"), "--config", str(second.config_path), "--sim", "2"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 125
    assert "already claimed by krex-runtime pid" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert first.krex("run", "--", "true").returncode == 0



def test_sigterm_with_on_shutdown_finish_lets_commands_end(make_runtime) -> None:
    rt = make_runtime(on_shutdown="finish", shutdown_grace_s=30.0)
    command_id = rt.krex("submit", "--", "sh", "-c", "sleep 1; echo done").stdout.strip()
    wait_until(lambda: sum(_running(rt)) == 1, what="the command to start")
    assert rt.stop() == 0
    finished = [e for e in read_trace(rt.trace_path).events if e["type"] == "command_finished"]
    assert [(e["id"], e["state"], e["exit_code"]) for e in finished] == [(command_id, "finished", 0)]
    assert (rt.run_dir / "output" / f"{command_id}.stdout").read_text() == "done\n"


def test_output_files_leave_with_the_history(make_runtime) -> None:
    rt = make_runtime(keep_finished=3)
    ids = [json.loads(rt.krex("run", "--json", "--", "echo", str(i)).stdout.splitlines()[-1])["id"] for i in range(6)]
    kept = sorted(p.name for p in (rt.run_dir / "output").iterdir())
    assert kept == sorted(f"{c}.{stream}" for c in ids[3:] for stream in ("stdout", "stderr"))
    assert (rt.run_dir / "output" / f"{ids[-1]}.stdout").read_text() == "5\n"
