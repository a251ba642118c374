"""No pooled command can reach the next one through their shared context process.

Each test runs a hostile pooled command, then a victim on the same GPU (one
simulated GPU, a pool of one: the victim runs in the process the hostile
command used, or in its replacement):

- what the hostile command leaves behind (a daemon thread, a thread started
  with _thread, a finaliser that starts one later, an audit hook, a
  faulthandler watchdog, a patch in a package that stays loaded, and the
  process settings it changes: timer slack, nice value, a resource limit, the
  C environment, a gc callback) never reaches the victim. The spy in each
  waits for the next command's argv, records it and halves
  time.perf_counter (the probe that measured 0.253 s for a 0.5 s sleep);
  what cannot be put back retires the process before the victim starts;
- a line it writes on its context process's control socket (found among its
  own descriptors: the command line no longer names it) does not pass for
  the process's: the process is replaced, the command fails saying so, and
  the next pooled command runs;
- a queued pooled command never outlives its own time limit.

And the context processes' logs are pruned.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import trace_events

from krex_runtime.commands.workers import worker_logs
from krex_runtime.testing.local_runtime import Runtime, wait_until

PY = sys.executable
POOL = '\n[pool]\nsize_per_gpu = 1\npreload = ["krex_runtime.sim.simcuda"]\nmax_commands = 100\n'

SPY = """
import json, os, sys, time
SPY_FILE = {spy_file!r}

def spy_once():
    if "victim-secret-argv" not in sys.argv or os.path.exists(SPY_FILE):
        return False
    with open(SPY_FILE, "w") as f:
        json.dump(sys.argv, f)
    real = time.perf_counter
    time.perf_counter = lambda: real() / 2
    return True

def spy():
    while not spy_once():
        time.sleep(0.005)
"""

# What each hostile command leaves behind, and whether its context process must retire for it.
LEFTOVERS: dict[str, tuple[str, str]] = {
    "daemon thread": ("import threading\nthreading.Thread(target=spy, daemon=True).start()\n", "threads"),
    "raw thread": ("import _thread\n_thread.start_new_thread(spy, ())\n", "threads"),
    "finaliser": (
        "import threading\n"
        "class Later:\n"
        "    def __del__(self):\n"
        "        threading.Thread(target=spy, daemon=True).start()\n"
        "a, b = Later(), Later()\n"
        "a.other, b.other = b, a\n"
        "del a, b\n",
        "threads",
    ),
    "audit hook": ("sys.addaudithook(lambda event, args: spy_once())\n", "state-changed"),
    "faulthandler watchdog": (
        "import faulthandler\nfaulthandler.dump_traceback_later(60, repeat=True, file=open(os.devnull, 'w'))\n",
        "threads",
    ),
    "patch in a package that stays loaded": (
        "import _statistics\n"
        "def inv_cdf(*args):\n"
        "    spy_once()\n"
        "    return 0.0\n"
        "_statistics._normal_dist_inv_cdf = inv_cdf\n",
        "state-changed",
    ),
    "process settings": (
        "import ctypes, gc, resource\n"
        "ctypes.CDLL(None).prctl(29, 123456789, 0, 0, 0)\n"  # PR_SET_TIMERSLACK
        "os.setpriority(os.PRIO_PROCESS, 0, 17)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "os.putenv('KREX_LEFT_BEHIND', '1')\n"
        "gc.callbacks.append(lambda phase, info: spy_once())\n",
        "",  # all put back: the process keeps serving
    ),
}

VICTIM = """
import ctypes, gc, json, os, resource, statistics, subprocess, sys, time
SPY_FILE = {spy_file!r}
problems = []
t0 = time.perf_counter()
time.sleep(0.5)
measured = time.perf_counter() - t0
if measured < 0.5:
    problems.append(f"measured {{measured:.3f}} s for a 0.5 s sleep")
if type(time.perf_counter).__name__ != "builtin_function_or_method":
    problems.append("time.perf_counter replaced")
gc.collect()
if abs(statistics.NormalDist().inv_cdf(0.975) - 1.96) > 0.01:
    problems.append("statistics patched")
if ctypes.CDLL(None).prctl(30, 0, 0, 0, 0) == 123456789:
    problems.append("timer slack")
if os.getpriority(os.PRIO_PROCESS, 0) == 17:
    problems.append("nice value")
if resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 64:
    problems.append("RLIMIT_NOFILE")
if "KREX_LEFT_BEHIND=" in subprocess.run(["env"], capture_output=True, text=True).stdout:
    problems.append("C environment")
if gc.callbacks:
    problems.append("gc callbacks")
if os.path.exists(SPY_FILE):
    problems.append("spied on: " + open(SPY_FILE).read())
print(json.dumps(problems))
"""


@pytest.fixture
def pooled(make_runtime: Any) -> Runtime:
    rt = make_runtime(sim=1, extra_config=POOL)
    wait_until(lambda: idle(rt) == 1, 60, "the context process to be ready")
    return rt


def gpu0(rt: Runtime) -> dict[str, Any]:
    with rt.client() as c:
        return c.call("snapshot")["state"]["gpus"][0]


def idle(rt: Runtime) -> int:
    return gpu0(rt)["pool"]["idle"]


def run_pooled(rt: Runtime, *argv: str, timeout: str = "60") -> dict[str, Any]:
    done = rt.krex("run", "--json", "--mode", "pooled", "--gpu", "0", "--timeout", timeout, "--", *argv)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", list(LEFTOVERS))
def test_nothing_a_pooled_command_leaves_reaches_the_next(pooled: Runtime, tmp_path: Path, kind: str) -> None:
    rt = pooled
    spy_file = tmp_path / "spied"
    leftover, cause = LEFTOVERS[kind]
    hostile = tmp_path / "hostile.py"
    hostile.write_text(SPY.format(spy_file=str(spy_file)) + leftover + "print('left', flush=True)\n")
    victim = tmp_path / "victim.py"
    victim.write_text(VICTIM.format(spy_file=str(spy_file)))

    first = run_pooled(rt, PY, str(hostile), "hostile-argv")
    assert first["state"] == "finished" and first["exit_code"] == 0, first
    second = run_pooled(rt, PY, str(victim), "victim-secret-argv")
    assert second["state"] == "finished" and second["exit_code"] == 0, second
    assert json.loads(second["stdout"]) == [], f"{kind}: the victim saw {second['stdout']}"
    assert not spy_file.exists(), spy_file.read_text()

    replaced = [e for e in trace_events(rt, "pool_worker_replaced") if e["worker"] == first["worker"]]
    if cause:
        # Retired after the hostile command, before the victim: the victim ran in its replacement.
        assert second["worker"] != first["worker"], (first, second)
        assert [e["cause"] for e in replaced] == [cause], replaced
        if cause == "threads":
            assert replaced[0]["reason"].startswith("left a thread running: "), replaced
    else:
        assert second["worker"] == first["worker"] and replaced == [], (first, second, replaced)


def test_a_daemon_thread_is_named_in_the_reason(pooled: Runtime, tmp_path: Path) -> None:
    rt = pooled
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), name='lurker', daemon=True).start()\n"
    result = run_pooled(rt, PY, "-c", code)
    assert result["state"] == "finished", result
    replaced = wait_until(lambda: trace_events(rt, "pool_worker_replaced"), 30, "the process to be replaced")
    assert replaced[0]["cause"] == "threads" and replaced[0]["reason"] == "left a thread running: lurker (daemon)"


# --- the control channel ------------------------------------------------------------

FORGER = """
import json, os, socket, stat, sys, time
cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
print("cmdline", json.dumps(cmdline), flush=True)
sockets = []
for name in os.listdir("/proc/self/fd"):
    try:
        if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
            sockets.append(int(name))
    except OSError:
        pass
print("sockets", len(sockets), flush=True)
how = sys.argv[1]
for fd in sockets:
    if how == "close":
        os.close(fd)
        continue
    s = socket.socket(fileno=os.dup(fd))
    if how == "bare done":
        s.sendall(b'{"type": "done"}\\n')
    else:
        done = {"type": "done", "state": "finished", "exit_code": 0, "signal": None, "reason": ""}
        clean = {"type": "clean", "ok": True, "cause": "", "reason": "", "clean_s": 0.0}
        s.sendall(json.dumps(done).encode() + b"\\n" + json.dumps(clean).encode() + b"\\n")
    s.close()
time.sleep(float(sys.argv[2]))
print("forger still running", flush=True)
"""


@pytest.mark.parametrize("how", ["bare done", "well-formed done and clean", "close"])
def test_a_forged_control_line_replaces_the_process_and_never_wedges_the_pool(
    pooled: Runtime, tmp_path: Path, how: str
) -> None:
    rt = pooled
    forger = tmp_path / "forger.py"
    forger.write_text(FORGER)
    result = run_pooled(rt, PY, str(forger), how, "30")
    # The pool is not wedged: the next pooled command runs, in a fresh process.
    after = run_pooled(rt, PY, "-c", "print('served')", timeout="60")
    assert after["state"] == "finished" and after["stdout"] == "served\n", after
    assert after["worker"] != result["worker"]
    said = dict(line.split(" ", 1) for line in result["stdout"].splitlines())
    assert "forger still running" not in said, result
    assert result["state"] == "failed", result
    if how == "close":
        assert result["reason"] == "its context process closed its control channel while the command ran", result
    else:
        assert result["reason"].startswith("misbehaved on its control channel: "), result
    replaced = [e for e in trace_events(rt, "pool_worker_replaced") if e["worker"] == result["worker"]]
    assert [e["cause"] for e in replaced] == ["misbehaved"], replaced
    # It found the socket among its descriptors; nothing of the channel is on the command line.
    assert int(said["sockets"]) >= 1, said
    cmdline = json.loads(said["cmdline"])
    assert "control_fd" not in cmdline and "key" not in cmdline and "{" not in cmdline, cmdline

def test_a_queued_pooled_command_never_outlives_its_time_limit(pooled: Runtime, tmp_path: Path) -> None:
    rt = pooled
    marker = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(600)"
    holder = rt.krex("submit", "--mode", "pooled", "--gpu", "0", "--", PY, "-c", code).stdout.strip()
    wait_until(marker.exists, 30, "the pooled command to hold the only context process")
    done = rt.krex("run", "--json", "--mode", "pooled", "--gpu", "0", "--timeout", "1", "--", PY, "-c", "print(1)")
    assert done.returncode == 124, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["state"] == "timeout", result
    assert result["reason"] == "still queued when its 1 s limit ran out (no context process of GPU 0 became idle)"
    assert rt.krex("cancel", holder).returncode == 0
    wait_until(lambda: idle(rt) == 1, 60, "the pool to be whole again")


# --- the context processes' logs ---------------------------------------------------


def test_context_process_logs_are_pruned(make_runtime: Any, tmp_path: Path) -> None:
    # What an earlier run left: more logs than are kept.
    pool_dir = tmp_path / "rt" / "run" / "pool"
    pool_dir.mkdir(parents=True)
    old = time.time() - 3600
    for i in range(worker_logs.KEEP_ENDED + 20):
        path = pool_dir / f"pool-dead-g0-{i}.log"
        path.write_text("an old context process's log\n")
        os.utime(path, (old + i, old + i))
    rt = make_runtime(sim=1, extra_config=POOL.replace("max_commands = 100", "max_commands = 1"))
    wait_until(lambda: idle(rt) == 1, 60, "the context process to be ready")
    logs = {p.stem for p in pool_dir.glob("pool-*.log")}
    dead = {s for s in logs if s.startswith("pool-dead-")}
    # The newest of the old ones are kept.
    assert dead == {f"pool-dead-g0-{i}" for i in range(20, worker_logs.KEEP_ENDED + 20)}, sorted(dead)
    served = []
    for i in range(3):  # each one retires its process (max_commands = 1)
        result = run_pooled(rt, PY, "-c", f"print({i})")
        assert result["state"] == "finished", result
        served.append(result["worker"])
    wait_until(lambda: idle(rt) == 1, 60, "the pool to be whole again")
    live = set(gpu0(rt)["pool"]["workers"])

    def pruned() -> bool:  # the last retired process's log is pruned for once it has exited
        logs = {p.stem for p in pool_dir.glob("pool-*.log")}
        return not any(f"pool-dead-g0-{i}" in logs for i in range(23))

    wait_until(pruned, 30, "the logs to be pruned")
    logs = {p.stem for p in pool_dir.glob("pool-*.log")}
    assert live <= logs and set(served) <= logs, (live, served, sorted(logs))
    assert len(logs - live) == worker_logs.KEEP_ENDED, sorted(logs)

