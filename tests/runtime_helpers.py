"""Helpers shared by the runtime tests (kept out of conftest.py, whose module
name is not unique across the test folders)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import zmq
from region_checks import check_nothing_left, is_frozen

from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.regions.freezer import is_stopped
from krex_runtime.regions.gate import core as gate
from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing import hygiene
from krex_runtime.testing.hygiene import krex_processes
from krex_runtime.testing.local_runtime import Runtime, command, wait_until
from krex_runtime.wire.trace.jsonl import read_trace

REPO = Path(__file__).resolve().parent.parent


def tenant_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes started by the runtime of `run_dir` (by their KREX_RUN_DIR)."""
    return krex_processes(run_dir)


def tree_pids(pid_dir: Path) -> list[int]:
    """The pids a process-tree test command recorded (its main process, child and setsid grandchild)."""
    return [int((pid_dir / n).read_text()) for n in ("main", "child", "grandchild")]


def all_gone(pids: list[int]) -> bool:
    """None of these processes is alive (a zombie counts as gone)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def pool_and_zygote_ready(rt: Runtime, idle: int) -> bool:
    """GPU 0's context pool has `idle` idle processes and its zygote is ready."""
    with rt.client() as c:
        gpu = c.call("snapshot")["state"]["gpus"][0]
    return gpu["pool"]["idle"] == idle and gpu["zygote"].get("state") == "ready"


def check_hold_limit_outcome(rt: Runtime, done: subprocess.CompletedProcess[str], holder: str, action: str,
                             others: list[str]) -> None:
    """A holder past the hold limit: revoked, its command finishes (exit 0) with
    ETIMEDOUT from its region; killed, it is cancelled. Either way nothing is
    left, nothing frozen; then the others are finished."""
    if action == "revoke":
        result = json.loads(done.stdout)
        assert result["state"] == "finished" and result["exit_code"] == 0, result
        assert region_results(output(rt, holder))[0]["error"] == "ETIMEDOUT"
    else:
        assert json.loads(done.stdout)["state"] == "cancelled"
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == []
    finish(rt, *others)


def open_folder(prefix: str) -> Iterator[Path]:
    """For a fixture (`yield from`): a folder in /tmp other uids (tenants',
    submitters') may pass through, which a test's tmp_path (root's alone) is
    not; removed after. Ask for the fixture before make_runtime, so that it
    outlives the runtimes in it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def stop_and_check(rt: Runtime) -> None:
    """Stop a test's runtime (if still running), assert it stopped cleanly and left
    no process behind, and remove its simulated device and cgroup slice."""
    if rt.proc is not None and rt.proc.poll() is None:
        assert rt.stop() == 0, rt.log_path.read_text()
    leftovers = tenant_processes(rt.run_dir)
    for p in leftovers:
        p.kill()
    assert not leftovers, f"processes left behind: {leftovers}"
    remove_device(rt.device)
    for version in (2, 1):  # a runtime killed on purpose leaves its slice
        leftover_slice = CgroupSlice.open(rt.run_dir, version)
        if leftover_slice is not None:
            leftover_slice.remove()


class Heartbeat:
    """The runtime's heartbeat on a gate, stamped from a thread until stopped:
    for tests that drive a gate without a runtime."""

    def __init__(self, g: gate.Gate) -> None:
        self.g, self.stop_event = g, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.wait(0.05):
            self.g.stamp_heartbeat()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join()


# --- runtimes under policy krex and their tenants -----------------------------------

PY = sys.executable
TENANTS = REPO / "tests" / "tenants"


def regions_config(backend: str = "preload", **settings: object) -> str:
    lines = [f'gate_backend = "{backend}"', "stale_after_s = 1.0", "heartbeat_interval_s = 0.2"]
    # These tests exercise every step of a region's entry, so the freeze too
    # unless they ask otherwise; the product's default is gpu-only.
    settings.setdefault("protection", "gpu+cpu")
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    return steady_cores("[regions]\n" + "\n".join(lines) + "\n")


# What a runtime SIGKILLed without its watchdog leaves (its restart, --recover, fail-open): tests of those.
NO_WATCHDOG = "watchdog = false"


# The simulated GPUs a region test can run on: NVIDIA's (tenants call the
# simulated CUDA driver, libkrex.so preloaded) and AMD's (tenants call the
# simulated HIP runtime, libkrex_hip.so preloaded). The tenants in
# tests/tenants/ pick theirs by the GPU's vendor (sim_gpu()).
VENDORS = ["nvidia", "amd"]
# Each gate backend on the simulated NVIDIA GPU, and the AMD GPU's only one
# (driver-lock is NVIDIA's checkpoint lock): (backend, vendor).
GATES = [("preload", "nvidia"), ("driver-lock", "nvidia"), ("preload", "amd")]


def krex_runtime(
    make_runtime, backend: str = "preload", sim: int = 1, slots: int = 16, watchdog: bool = True,
    vendor: str = "nvidia", **settings: object,
) -> Runtime:
    """A runtime under policy krex with `sim` simulated GPUs of `vendor`."""
    return make_runtime(policy="krex", slots=slots, extra_config=regions_config(backend, **settings),
                        runtime_extra="" if watchdog else NO_WATCHDOG, **simulated_gpus(vendor, sim))


def simulated_gpus(vendor: str, count: int = 1) -> dict[str, int]:
    """make_runtime's arguments for `count` simulated GPUs of `vendor`, and none of the other's."""
    return {"nvidia": {"sim": count, "sim_amd": 0}, "amd": {"sim": 0, "sim_amd": count}}[vendor]


def submit(rt: Runtime, *argv: str, gpu: int | None = None) -> str:
    pin = ["--gpu", str(gpu)] if gpu is not None else []
    done = rt.krex("submit", *pin, "--", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def busy(rt: Runtime, gpu: int = 0, kernel_us: float = 2000, depth: int = 4, threads: int = 1) -> str:
    return submit(rt, PY, str(TENANTS / "busy.py"), str(kernel_us), str(depth), str(threads), gpu=gpu)


def output(rt: Runtime, command_id: str) -> str:
    path = rt.run_dir / "output" / f"{command_id}.stdout"
    return path.read_text() if path.exists() else ""


def wait_ready(rt: Runtime, *ids: str) -> None:
    for command_id in ids:
        wait_until(lambda command_id=command_id: "ready" in output(rt, command_id), 60, f"tenant {command_id} to start submitting")


class HeldRegions:
    """A tenant (tenants/held_activity.py) that holds its regions when the test
    says: submitted and warm before the test sets up what happens around the
    hold, so no start-up time of the holder's races another tenant's call."""

    def __init__(self, rt: Runtime, control: Path, *modes: str, gpu: int | None = None) -> None:
        control.mkdir(exist_ok=True)
        self.rt, self.control = rt, control
        self.id = submit(rt, PY, str(TENANTS / "held_activity.py"), str(control), *modes, gpu=gpu)
        wait_until(lambda: any(r.get("ready") for r in self.results()), 60, "the holder to warm up")

    def results(self) -> list[dict]:
        return [json.loads(line) for line in output(self.rt, self.id).splitlines() if line.startswith("{")]

    def go(self, i: int) -> None:
        (self.control / f"go{i}").touch()

    def granted(self, i: int) -> dict:
        wait_until(lambda: any(r.get("granted") == i for r in self.results()), 60, f"region {i} to be granted")
        return next(r for r in self.results() if r.get("granted") == i)

    def release(self, i: int) -> dict:
        """Ends region i; its verdict and reasons, as its holder read them."""
        (self.control / f"release{i}").touch()
        wait_until(lambda: len([r for r in self.results() if "verdict" in r]) > i, 60, f"region {i}'s verdict")
        return [r for r in self.results() if "verdict" in r][i]


def snapshot(rt: Runtime) -> dict:
    with rt.client() as c:
        return c.call("snapshot")["state"]


def gpu_state(rt: Runtime, gpu: int = 0) -> dict:
    return next(g for g in snapshot(rt)["gpus"] if g["index"] == gpu)


def command_pid(rt: Runtime, command_id: str) -> int:
    return next(c["pid"] for c in snapshot(rt)["commands"] if c["id"] == command_id)


def check_vendor(rt: Runtime, vendor: str, *ids: str) -> None:
    """The tenants `ids` run on their vendor's API with its interception
    library mapped: the simulated HIP runtime and libkrex_hip.so on AMD,
    libkrex.so and no HIP on NVIDIA (a test parametrised over the vendor
    that silently ran NVIDIA tenants twice would prove nothing of HIP)."""
    for command_id in ids:
        maps = Path(f"/proc/{command_pid(rt, command_id)}/maps").read_text()
        libraries = {name for name in ("libamdhip64.so", "libkrex_hip.so", "libkrex.so") if name in maps}
        want = {"libamdhip64.so", "libkrex_hip.so"} if vendor == "amd" else {"libkrex.so"}
        assert libraries == want, f"{command_id} on {vendor} maps {sorted(libraries)}"


def cgroup_root(rt: Runtime) -> Path | None:
    with rt.client() as c:
        root = c.call("status")["cgroups"]
    return Path(root) if root else None


def frozen_cgroups(root: Path | None) -> list[str]:
    if root is None or not root.exists():
        return []
    return [g.name for g in root.iterdir() if g.is_dir() and is_frozen(g)]


def trace_events(rt: Runtime, kind: str) -> list[dict]:
    return [e for e in read_trace(rt.trace_path).events if e["type"] == kind]


def region_results(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def finish(rt: Runtime, *ids: str) -> None:
    for command_id in ids:
        rt.krex("cancel", command_id)
    for command_id in ids:
        rt.krex("wait", "--json", command_id)


# The test machine is shared (two pytest workers, their tenants, other users):
# a measuring thread there waits for its core far more than on a GPU node, and
# the certificate says so (regions/hold_watch.py). Tests of other properties
# hold that witness's bound out of reach; tests of it name their own. The
# bound is the wait's minimum, not its share: a thread already queued for its
# core when the hold starts is credited that wait when it next runs, so on a
# crowded 2-core machine a share can read above 100%.
CPU_WAIT_KEYS = ("perturbed_cpu_wait_share", "perturbed_cpu_wait_min_ms")


def steady_cores(extra_config: str) -> str:
    """`extra_config` with the measuring thread's wait bound out of reach, unless it sets one."""
    if any(key in extra_config for key in CPU_WAIT_KEYS):
        return extra_config
    line = "perturbed_cpu_wait_min_ms = 60000.0\n"
    if "[regions]\n" in extra_config:
        return extra_config.replace("[regions]\n", "[regions]\n" + line, 1)
    return extra_config + "\n[regions]\n" + line


def module_runtime(folder: Path, **settings: object) -> Iterator[Runtime]:
    """A runtime a test file's tests share (a module-scoped fixture yields from
    it): started in `folder`, stopped and checked clean at the end, and
    nothing of it left on the node."""
    before = hygiene.baseline()
    settings["extra_config"] = steady_cores(str(settings.get("extra_config", "")))
    runtime = Runtime(folder, **settings).start()
    try:
        yield runtime
    finally:
        stop_and_check(runtime)
    assert not hygiene.leftovers(runtime.run_dir, runtime.lock_dir, before)


# Fault tests state their bound: everything is thawed and reopened within this
# long of the fault (the heartbeat bound the tests use is 1 s).
RECOVERY_BOUND_S = 10.0


def killed_for_the_watchdog(rt: Runtime, base: Any, bound_s: float) -> list[str]:
    """SIGKILLs the runtime and waits for its watchdog to thaw and reopen, then
    to end its commands and remove what it left (`base`: hygiene.baseline()
    before it started). Returns what the watchdog said it did, one line each."""
    assert rt.proc is not None
    pid = rt.proc.pid
    rt.stop(signal.SIGKILL)
    wait_until(lambda: hygiene.held_back(rt.run_dir) == [], bound_s, "the watchdog to thaw and reopen")
    wait_until(lambda: hygiene.leftovers(rt.run_dir, rt.lock_dir, base) == [], bound_s,
               "the watchdog to end the dead runtime's commands and remove its slice, gates and sockets")
    return re.findall(rf"^krex-runtime watchdog: runtime pid {pid} died: (.*)$", rt.log_path.read_text(), re.M)


def stop_the_first(rt: Runtime, others: list[str]) -> int:
    """Stops the first of the running tenants `others` (SIGSTOP, as an operator
    or a debugger would, not the runtime's freezer); its pid."""
    wait_ready(rt, *others)
    stopped = command_pid(rt, others[0])
    os.kill(stopped, signal.SIGSTOP)
    wait_until(lambda: is_stopped(stopped), 10, "the tenant to stop")
    return stopped


def bench_result(problem: str, name: str, ms: float, mhz: float | None) -> dict:
    """One candidate's line of a `krex bench` results file."""
    return {"problem": problem, "candidate": name, "ok": True, "median_ms": ms, "sm_clock_mhz": mhz}


@functools.cache
def load_test_file(path: str) -> ModuleType:
    """A test file of any part (`regions/test_regions.py`, under tests/), loaded
    by its path to read its tests: the parts' folders are not packages."""
    file = REPO / "tests" / path
    spec = importlib.util.spec_from_file_location(f"test_file_{path.replace('/', '_').removesuffix('.py')}", file)
    assert spec is not None and spec.loader is not None, path
    if str(file.parent) not in sys.path:
        sys.path.append(str(file.parent))  # its folder's helper modules, found as when pytest collects it
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- a fake runtime on a control socket ---------------------------------------------

# What the fake runtime sends for one request: messages (dicts are encoded, bytes sent as they are).
Answer = Callable[[dict[str, Any]], list[Any]]


def reply(req: dict[str, Any], body: Any = None, **envelope: Any) -> dict[str, Any]:
    return {"v": 1, "type": "reply", "id": "r", "time": 0.0, "re": req["id"], "ok": True,
            "body": {} if body is None else body, **envelope}


def push(req: dict[str, Any], kind: str, body: Any) -> dict[str, Any]:
    return {"v": 1, "type": kind, "id": "p", "time": 0.0, "re": req["id"], "body": body}


class FakeRuntime(threading.Thread):
    """A ROUTER that answers each request as `answer` says; `hello` (the
    clients' ping) is answered properly unless `answer` handles it too."""

    def __init__(self, endpoint: str, answer: Answer, pings_too: bool = False) -> None:
        super().__init__(daemon=True)
        self.answer, self.pings_too = answer, pings_too
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.stop = threading.Event()
        self.requests: list[dict[str, Any]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            if not self.sock.poll(50):
                continue
            route, frame = self.sock.recv_multipart()
            req = json.loads(frame)
            self.requests.append(req)
            if req["type"] == "hello" and not self.pings_too:
                messages: list[Any] = [reply(req, {"protocol": 1})]
            else:
                messages = self.answer(req)
            for msg in messages:
                self.sock.send_multipart([route, msg if isinstance(msg, bytes) else json.dumps(msg).encode()])
        self.sock.close(linger=0)
        self.ctx.term()


def start_refused(rt: Runtime, *args: str) -> str:
    """Starts `rt` (its config written) with `args`, expecting the refusal:
    exit status 125 and one line on stderr, no traceback. Returns the line."""
    rt.root.mkdir(parents=True, exist_ok=True)
    rt.write_config()
    done = subprocess.run([*command("krex-runtime"), "--config", str(rt.config_path), "--sim", str(rt.sim), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 125, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one line, no traceback
    return lines[0]


def run_as(uid: int, gid: int, groups: list[int], fn: Callable[[], Any]) -> Any:
    """`fn` in a forked child that has dropped to `uid`, `gid` and `groups`:
    its JSON-able result; an AssertionError saying what it raised if it did."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            result = {"value": fn()}
        except BaseException as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    result = json.loads(data)
    if "error" in result:
        raise AssertionError(f"as uid {uid}: {result['error']}")
    return result["value"]
