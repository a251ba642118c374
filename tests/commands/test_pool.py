"""The context pool end to end: a real runtime on simulated GPUs, context
processes with the interception library preloaded, real CLI processes."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import TENANTS, tenant_processes

from krex_runtime.api import Client, RequestFailed
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

PY = sys.executable
SIZE = 4


def pool_config(size: int = SIZE, max_commands: int = 50, zygote: bool = False) -> str:
    return (
        f'\n[pool]\nsize_per_gpu = {size}\npreload = ["krex_runtime.sim.simcuda"]\nmax_commands = {max_commands}\n'
        f"zygote = {str(zygote).lower()}\n"
    )


def pooled_runtime(make_runtime: Any, **kwargs: Any) -> Runtime:
    pool = kwargs.pop("pool", {})
    rt = make_runtime(extra_config=pool_config(**pool) + kwargs.pop("extra", ""), **kwargs)
    wait_until(lambda: pool_settled(rt, pool.get("size", SIZE)), 60, "the pool to be warm")
    if pool.get("zygote"):
        wait_until(lambda: zygotes_ready(rt), 60, "the zygotes to be ready")
    return rt


def zygotes_ready(rt: Runtime) -> bool:
    with rt.client() as c:
        return all(g["zygote"].get("state") == "ready" for g in c.call("snapshot")["state"]["gpus"])


def pools(rt: Runtime) -> dict[int, dict[str, Any]]:
    with rt.client() as c:
        return {g["index"]: g["pool"] for g in c.call("snapshot")["state"]["gpus"]}


def pool_settled(rt: Runtime, size: int = SIZE) -> bool:
    return all(p["idle"] == size and len(p["workers"]) == size for p in pools(rt).values())


SCRIPTS = {
    "helper.py": "VALUE = 'clean'\n",
    "ok.py": "import sys\nprint('ok', *sys.argv[1:])\nprint('to stderr', file=sys.stderr)\n",
    "raises.py": "def f():\n    raise ValueError('boom')\n\nf()\n",
    "exits.py": "import sys\nprint('leaving', flush=True)\nsys.exit(int(sys.argv[1]))\n",
    "exit_message.py": "import sys\nsys.exit('bad input')\n",
    "os_exit.py": "import os\nos.write(1, b'bye\\n')\nos._exit(7)\n",
    "segfault.py": "import ctypes\nprint('before', flush=True)\nctypes.string_at(0)\n",
    "hang.py": "import time\nprint('hanging', flush=True)\ntime.sleep(600)\n",
    "interrupt.py": "raise KeyboardInterrupt\n",
    "c_printf.py": "import ctypes\nctypes.CDLL(None).printf(b'from C %d\\n', 42)\nprint('from python')\n",
    "syntax.py": "def broken(:\n    pass\n",
    "buffered.py": "import atexit, sys\natexit.register(print, 'at exit')\nsys.stdout.write('no newline')\n",
    "leak.py": (
        "from krex_runtime.sim.simcuda import SimCuda\n"
        "cuda = SimCuda()\n"
        "ptrs = [cuda.alloc(1 << 20) for _ in range(4)]\n"
        "cuda.launch(1000)\ncuda.synchronize()\nprint('leaked', len(ptrs))\n"
    ),
    "thread.py": "import threading, time\nthreading.Thread(target=time.sleep, args=(2,)).start()\nprint('left a thread')\n",
    "mutate.py": (
        "import atexit, os, signal, sys\n"
        "import helper\n"
        "helper.VALUE = 'dirty'\n"
        "sys.path.append('/polluted')\n"
        "os.environ['POLLUTED'] = '1'\n"
        "os.chdir('/')\n"
        "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
        "LEFT_OPEN = open(__file__)\n"
        "atexit.register(print, 'mutate exit handler')\n"
        "print('mutated')\n"
    ),
    "probe.py": (
        "import os, signal, sys\n"
        "problems = []\n"
        "if '/polluted' in sys.path: problems.append('sys.path')\n"
        "if 'POLLUTED' in os.environ: problems.append('environ')\n"
        "if os.getcwd() != sys.argv[1]: problems.append('cwd ' + os.getcwd())\n"
        "if 'helper' in sys.modules: problems.append('helper still imported')\n"
        "import helper\n"
        "if helper.VALUE != 'clean': problems.append('helper global')\n"
        "if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL: problems.append('signal handler')\n"
        "if 'LEFT_OPEN' in globals(): problems.append('globals')\n"
        "if os.environ.get('KREX_COMMAND_ID', '').startswith('pool-'): problems.append('identity')\n"
        "def target(fd):\n"
        "    try:\n"
        "        return os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except OSError:\n"
        "        return ''\n"
        "if any(target(fd).endswith('mutate.py') for fd in os.listdir('/proc/self/fd')): problems.append('open file')\n"
        "print('probe', 'ok' if not problems else problems)\n"
        "sys.exit(0 if not problems else 99)\n"
    ),
}


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    for name, text in SCRIPTS.items():
        (folder / name).write_text(text)
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "tool.py").write_text(
        "import sys\n\ndef main():\n    print('tool', *sys.argv[1:])\n    return 4\n\n"
        "if __name__ == '__main__':\n    print('tool as main', *sys.argv[1:])\n"
    )
    return folder


# --- many commands, including the ones that break things ----------------------------


def expectation(kind: str, i: int, folder: Path) -> tuple[list[str], float | None, dict[str, Any]]:
    """argv, time limit, and what its result must be."""
    s = str(folder)
    table: dict[str, tuple[list[str], float | None, dict[str, Any]]] = {
        "ok": ([PY, f"{s}/ok.py", str(i)], None, {"exit_code": 0, "stdout": f"ok {i}\n", "stderr": "to stderr\n"}),
        "raises": ([PY, f"{s}/raises.py"], None, {"exit_code": 1, "stderr_has": "ValueError: boom"}),
        "exits": ([PY, f"{s}/exits.py", str(i % 50)], None, {"exit_code": i % 50, "stdout": "leaving\n"}),
        "exit_message": ([PY, f"{s}/exit_message.py"], None, {"exit_code": 1, "stderr": "bad input\n"}),
        "os_exit": ([PY, f"{s}/os_exit.py"], None, {"exit_code": 7, "stdout": "bye\n"}),
        "segfault": ([PY, f"{s}/segfault.py"], None, {"signal": signal.SIGSEGV, "stdout": "before\n"}),
        "hang": ([PY, f"{s}/hang.py"], 1.0, {"state": "timeout", "stdout": "hanging\n"}),
        "leak": ([PY, f"{s}/leak.py"], None, {"exit_code": 0, "stdout": "leaked 4\n"}),
        "thread": ([PY, f"{s}/thread.py"], None, {"exit_code": 0, "stdout": "left a thread\n"}),
        "mutate": ([PY, f"{s}/mutate.py"], None, {"exit_code": 0, "stdout": "mutated\nmutate exit handler\n"}),
        "probe": ([PY, f"{s}/probe.py", s], None, {"exit_code": 0, "stdout": "probe ok\n"}),
        "module": ([PY, "-m", "pkg.tool", "x"], None, {"exit_code": 0, "stdout": "tool as main x\n"}),
        "function": (["pkg.tool:main", "y"], None, {"exit_code": 4, "stdout": "tool y\n"}),
    }
    return table[kind]


ORDINARY = ["ok", "probe", "mutate", "raises", "exits", "leak", "probe", "exit_message", "module", "function", "ok"]
BREAKING = ["segfault", "os_exit", "thread", "hang"]


def kind_of(i: int) -> str:
    if i % 25 == 24:
        return BREAKING[(i // 25) % len(BREAKING)]
    return ORDINARY[i % len(ORDINARY)]


def check_result(result: dict[str, Any], expected: dict[str, Any], label: str, mode: str = "pooled") -> None:
    out = Path(result["stdout_path"]).read_text()
    err = Path(result["stderr_path"]).read_text()
    where = f"{label}: {result} stdout={out!r} stderr={err!r}"
    assert result["mode"] == mode, where
    # `finished` is exit status 0; another exit status, or a signal, is `failed`.
    ended = "finished" if expected.get("exit_code") == 0 else "failed"
    assert result["state"] == expected.get("state", ended), where
    if "exit_code" in expected:
        assert result["exit_code"] == expected["exit_code"], where
    if "signal" in expected:
        assert result["signal"] == expected["signal"], where
    if "stdout" in expected:
        assert out == expected["stdout"], where
    if "stderr" in expected:
        assert err == expected["stderr"], where
    if "stderr_has" in expected:
        assert expected["stderr_has"] in err and "context_worker" not in err and "runpy" not in err, where


@pytest.mark.parametrize("mode", ["pooled", "forked"])
def test_five_hundred_commands_keep_the_pool_whole_and_clean(make_runtime, scripts: Path, mode: str) -> None:
    forked = mode == "forked"
    rt = pooled_runtime(make_runtime, pool={"max_commands": 1000, "size": 1 if forked else SIZE, "zygote": forked})
    local = threading.local()

    def one(i: int) -> tuple[int, str, dict[str, Any], dict[str, Any]]:
        kind = kind_of(i)
        argv, timeout, expected = expectation(kind, i, scripts)
        if not hasattr(local, "client"):
            local.client = Client(f"ipc://{rt.run_dir / 'control.sock'}", timeout=60)
        body = {"argv": argv, "mode": mode, "cwd": str(scripts), "env": dict(os.environ), "timeout_s": timeout}
        command_id = local.client.call("submit", body)["id"]
        result = local.client.call("wait", {"id": command_id, "attach": False}, timeout=120)
        return i, kind, result, expected

    with ThreadPoolExecutor(max_workers=6) as workers:
        results = list(workers.map(one, range(500)))
    for i, kind, result, expected in results:
        check_result(result, expected, f"#{i} {kind}", mode)
    if forked:
        # Every command was a fresh process: the zygotes served them all and never had to restart.
        with rt.client() as c:
            zygotes = [g["zygote"] for g in c.call("snapshot")["state"]["gpus"]]
        assert all(z["state"] == "ready" and z["restarts"] == 0 for z in zygotes), zygotes
        assert sum(z["forks"] for z in zygotes) == 500, zygotes
        return
    wait_until(lambda: pool_settled(rt), 60, "the pool to be whole again")
    reasons: dict[str, int] = {}
    for pool in pools(rt).values():
        for cause, n in pool["reasons"].items():
            reasons[cause] = reasons.get(cause, 0) + n
    # Crashes, timeouts and stray threads cost a context process; leaks and
    # mutations do not (they are undone).
    assert reasons.get("exited", 0) >= 10 and reasons.get("timeout", 0) == 5 and reasons.get("threads", 0) == 5, reasons
    assert "leak" not in reasons and "health" not in reasons and "cleanup" not in reasons, reasons
    # Nothing these commands do changes process-wide state that must retire a context process.
    assert "state-changed" not in reasons, [e for e in read_trace(rt.trace_path).events if e.get("cause") == "state-changed"]


def test_pooled_and_forked_modes_look_like_process_mode_from_outside(make_runtime, scripts: Path) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 2, "zygote": True})
    s = str(scripts)
    cases = [
        [PY, f"{s}/ok.py", "a", "b"],
        [PY, f"{s}/raises.py"],
        [PY, f"{s}/exits.py", "5"],
        [PY, f"{s}/exits.py", "300"],
        [PY, f"{s}/exit_message.py"],
        [PY, f"{s}/os_exit.py"],
        [PY, f"{s}/segfault.py"],
        [PY, f"{s}/interrupt.py"],
        [PY, f"{s}/c_printf.py"],
        [PY, f"{s}/syntax.py"],
        [PY, f"{s}/buffered.py"],
        [PY, "-u", f"{s}/exits.py", "0"],
        [PY, f"{s}/missing.py"],
        [PY, "-m", "pkg.tool", "z"],
        [PY, "-c", "import sys; print('code', sys.argv[1:]); sys.exit(9)", "q"],
    ]
    for argv in cases:
        runs = {}
        for mode in ("process", "forked", "pooled"):
            done = subprocess_in(rt, scripts, "run", "--mode", mode, "--", *argv)
            # krex's own closing line names the command id, which differs.
            stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("krex: "))
            runs[mode] = (done.returncode, done.stdout, stderr)
        assert runs["pooled"] == runs["process"] == runs["forked"], f"{argv}: {runs}"
    modes = ("process", "forked", "pooled")
    timeouts = [subprocess_in(rt, scripts, "run", "--mode", m, "--timeout", "1", "--", PY, f"{s}/hang.py") for m in modes]
    assert [t.returncode for t in timeouts] == [124] * 3 and {t.stdout for t in timeouts} == {"hanging\n"}


def subprocess_in(rt: Runtime, cwd: Path, *args: str) -> Any:
    import subprocess

    from krex_runtime.testing.local_runtime import BIN

    return subprocess.run([str(BIN / "krex"), *args], env=rt.env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_context_process_is_replaced_after_max_commands(make_runtime) -> None:
    rt = pooled_runtime(make_runtime, sim=1, pool={"size": 1, "max_commands": 3})
    assert rt.proc is not None
    warm_fds = hygiene.open_fds(rt.proc.pid)
    for i in range(7):
        done = rt.krex("run", "--mode", "pooled", "--", PY, "-c", f"print({i})")
        assert done.returncode == 0 and done.stdout == f"{i}\n", done.stderr
    wait_until(lambda: pool_settled(rt, 1), 30, "the pool to be whole again")
    assert pools(rt)[0]["reasons"] == {"max_commands": 2}
    # A replaced context process takes its channels with it.
    wait_until(lambda: not hygiene.grown_fds(rt.proc.pid, warm_fds), 10, "the runtime's descriptors back")


def test_pooled_argv_that_is_not_python_is_refused(make_runtime, scripts: Path) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 1})
    done = rt.krex("run", "--mode", "pooled", "--", "sh", "-c", "true")
    assert done.returncode == 125 and "not a Python interpreter" in done.stderr


def test_pooled_needs_a_pool(runtime: Runtime) -> None:
    done = runtime.krex("run", "--mode", "pooled", "--", PY, "-c", "pass")
    assert done.returncode == 125 and "pool.size_per_gpu" in done.stderr


# --- recycling and replacement -----------------------------------------------------


def workers_of(rt: Runtime, gpu: int) -> dict[str, Any]:
    return pools(rt)[gpu]["workers"]


def test_recycle_after_the_current_command(make_runtime, scripts: Path, tmp_path: Path) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 2})
    before = set(workers_of(rt, 0))
    marker = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(1); print('finished')"
    command_id = rt.krex("submit", "--mode", "pooled", "--gpu", "0", "--", PY, "-c", code).stdout.strip()
    wait_until(marker.exists, 30, "the pooled command to start")
    done = rt.krex("recycle", "0")
    assert done.returncode == 0, done.stderr
    result = json.loads(rt.krex("wait", "--json", command_id).stdout)
    assert result["state"] == "finished" and result["exit_code"] == 0
    assert result["stdout"] == "finished\n"
    wait_until(lambda: pool_settled(rt, 2) and not before & set(workers_of(rt, 0)), 60, "GPU 0's pool to be renewed")
    assert pools(rt)[0]["reasons"] == {"recycled": 2}
    assert pools(rt)[1]["replaced"] == 0


def test_recycle_now_fails_the_busy_command(make_runtime, scripts: Path, tmp_path: Path) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 2})
    marker = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(600)"
    command_id = rt.krex("submit", "--mode", "pooled", "--gpu", "1", "--", PY, "-c", code).stdout.strip()
    wait_until(marker.exists, 30, "the pooled command to start")
    assert rt.krex("recycle", "1", "--now").returncode == 0
    done = rt.krex("wait", "--json", command_id)
    result = json.loads(done.stdout)
    assert result["state"] == "failed" and result["reason"] == "recycled", result
    assert done.returncode == 128 + result["signal"]  # ended by a signal, like a cancelled process command
    wait_until(lambda: pool_settled(rt, 2), 60, "GPU 1's pool to be whole again")
    assert pools(rt)[1]["reasons"] == {"recycled": 2}


def test_recycle_is_refused_on_the_read_only_socket(make_runtime) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 1})
    with Client(f"ipc://{rt.run_dir / 'control-ro.sock'}") as c, pytest.raises(RequestFailed) as err:
        c.call("recycle", {"gpu": 0})
    assert err.value.code == "refused"


def test_context_process_killed_from_outside_is_replaced(make_runtime) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 2})
    victim_id, victim = next(iter(workers_of(rt, 0).items()))
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(lambda: pool_settled(rt, 2) and victim_id not in workers_of(rt, 0), 60, "a replacement")
    assert pools(rt)[0]["reasons"] == {"exited": 1}
    done = rt.krex("run", "--mode", "pooled", "--gpu", "0", "--", PY, "-c", "print('still serving')")
    assert done.returncode == 0 and done.stdout == "still serving\n"


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_cancel_ends_a_pooled_command_and_its_context(make_runtime, tmp_path: Path, cgroups: str) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 1}, cgroups=cgroups)
    marker = tmp_path / "started"
    code = f"import pathlib, subprocess, time; subprocess.Popen(['sleep', '600']); pathlib.Path({str(marker)!r}).touch(); time.sleep(600)"
    command_id = rt.krex("submit", "--mode", "pooled", "--gpu", "0", "--", PY, "-c", code).stdout.strip()
    wait_until(marker.exists, 30, "the pooled command to start")
    assert rt.krex("cancel", command_id).returncode == 0
    result = json.loads(rt.krex("wait", "--json", command_id).stdout)
    assert result["state"] == "cancelled"
    wait_until(lambda: pool_settled(rt, 1), 60, "the pool to be whole again")
    # The command's child went with its context process.
    assert [p for p in tenant_processes(rt.run_dir) if p.name() == "sleep"] == []


def test_runtime_stop_ends_every_context_process(make_runtime, tmp_path: Path) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 2})
    marker = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(600)"
    rt.krex("submit", "--mode", "pooled", "--", PY, "-c", code)
    wait_until(marker.exists, 30, "the pooled command to start")
    assert rt.stop() == 0
    assert tenant_processes(rt.run_dir) == []
    events = [e["type"] for e in read_trace(rt.trace_path).events]
    assert events.count("pool_worker_stopped") == 4
    # The fixture checks that no tenant process (context processes included) is left.


# --- identity under policy krex --------------------------------------------------------


def test_pooled_command_takes_regions_as_itself(make_runtime) -> None:
    extra = '[regions]\nstale_after_s = 1.0\nheartbeat_interval_s = 0.2\n'
    rt = pooled_runtime(make_runtime, policy="krex", sim=1, pool={"size": 1}, extra=extra)
    ids = []
    for _ in range(2):  # the second command reuses the context process under its own id
        done = rt.krex("run", "--mode", "pooled", "--json", "--", PY, str(TENANTS / "measured_region.py"))
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["stdout"].startswith(f"measured {result['id']}\n")
        ids.append(result["id"])
    granted = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_granted"]
    assert [e["command_id"] for e in granted] == ids
    assert re.fullmatch(r"pool-\w+-g0-\d+", json.loads(done.stdout.splitlines()[-1])["worker"])


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_children_a_pooled_command_leaves_are_ended(make_runtime, cgroups: str) -> None:
    rt = pooled_runtime(make_runtime, pool={"size": 1}, cgroups=cgroups)
    code = "import subprocess; p = subprocess.Popen(['sleep', '600']); print(p.pid)"
    done = rt.krex("run", "--mode", "pooled", "--gpu", "0", "--", PY, "-c", code)
    assert done.returncode == 0, done.stderr
    child = int(done.stdout)
    wait_until(lambda: not _alive(child), 10, "the stray child to be ended")
    wait_until(lambda: pool_settled(rt, 1), 30, "the context process to be idle again")
    assert pools(rt)[0]["replaced"] == 0


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
