"""Tenants with a uid of their own (`tenants.uid_range`) cannot reach each other.

A real runtime as root gives each command a uid from 61000 on, with no
account behind it. A victim command holds its region token in its
environment and prints a secret; an attacker command, another tenant of the
same GPU, tries what a tenant sharing the victim's uid could do: read its
environment, its output (through /proc and in the run folder), signal it,
write its gate entries and its report, and write the gate's header
(setting `holder` or the gate word would park every other tenant). Each
attempt must fail, the header write with SIGSEGV on the read-only mapping.
Afterwards every uid is back: nothing runs as one, no home or gate entries
file is left (and the hygiene checks of make_runtime pass).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from krex_runtime.api import Client, RequestFailed
from krex_runtime.host.identities import Identities, processes_of
from krex_runtime.regions.gate import header_layout as gate_layout
from krex_runtime.regions.gate.core import Gate
from krex_runtime.sim.device_file import device_path
from krex_runtime.testing.local_runtime import Runtime, command, wait_until

FIRST_UID, UIDS, GROUP = 61000, 8, 60999
PYTHON = "/usr/bin/python3"  # the runtime's own Python may sit where other uids cannot reach

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path(PYTHON).exists(), reason=f"needs root and {PYTHON}"
)

VICTIM = r"""
import json, os, time
print(json.dumps({"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                  "tenant": os.environ["KREX_TENANT_ID"], "home": os.environ["HOME"]}), flush=True)
print("SECRET-OUTPUT", flush=True)
time.sleep(120)
"""

ATTACKER = r"""
import ctypes, errno, json, mmap, os, signal, sys
victim = json.loads(sys.argv[1])
run_dir, gate = os.environ["KREX_RUN_DIR"], os.environ["KREX_GATE_PATH"]
found = {"uid": os.getuid(), "groups": sorted(os.getgroups())}

def attempt(name, fn):
    try:
        fn()
        found[name] = "ok"
    except OSError as exc:
        found[name] = errno.errorcode[exc.errno]

def read(path):
    with open(path, "rb") as f:
        f.read()

attempt("environ", lambda: read(f"/proc/{victim['pid']}/environ"))
attempt("stdout_fd", lambda: read(f"/proc/{victim['pid']}/fd/1"))
attempt("output_file", lambda: read(f"{run_dir}/output/{victim['id']}.stdout"))
attempt("signal", lambda: os.kill(victim["pid"], signal.SIGSTOP))
attempt("entries", lambda: os.close(os.open(f"{gate}.{victim['tenant']}", os.O_RDWR)))
attempt("own_entries", lambda: os.close(os.open(f"{gate}.{os.environ['KREX_TENANT_ID']}", os.O_RDWR)))
attempt("report", lambda: os.close(os.open(f"{run_dir}/tenant-reports/{victim['id']}.unprotected", os.O_WRONLY)))
attempt("home", lambda: os.listdir(victim["home"]))
attempt("header_rw", lambda: os.close(os.open(gate, os.O_RDWR)))

# The header mapped the way the interception library maps it: read-only.
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(gate, os.O_RDONLY)
addr = libc.mmap(None, 256, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
found["mprotect"] = errno.errorcode.get(ctypes.get_errno(), "ok") if libc.mprotect(
    ctypes.c_void_p(addr), 256, mmap.PROT_READ | mmap.PROT_WRITE) else "ok"
print(json.dumps(found), flush=True)
if os.fork() == 0:  # the write itself, in a child: it dies of SIGSEGV
    ctypes.c_int64.from_address(addr + 32).value = int(os.environ["KREX_TENANT_ID"])  # holder
    os._exit(0)
print(json.dumps({"header_write": os.WEXITSTATUS(s) if os.WIFEXITED(s := os.wait()[1]) else -os.WTERMSIG(s)}))
"""


def _uid_range(extra: str = "") -> str:
    return f"uid_range = [{FIRST_UID}, {UIDS}]\ngroup = \"{GROUP}\"\n{extra}"


def _running_as_range() -> list[int]:
    return [pid for uid in range(FIRST_UID, FIRST_UID + UIDS) for pid in processes_of(uid)]


def test_tenants_with_their_own_uids_cannot_reach_each_other(open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, policy="krex", sim=1, tenants_extra=_uid_range(),
                      runtime_extra='read_only_group = "*"')
    victim_id = rt.krex("submit", "--", PYTHON, "-c", VICTIM).stdout.strip()
    out = rt.run_dir / "output" / f"{victim_id}.stdout"
    wait_until(lambda: out.exists() and b"SECRET-OUTPUT" in out.read_bytes(), 60, "the victim's first lines")
    victim = json.loads(out.read_text().splitlines()[0]) | {"id": victim_id}
    assert FIRST_UID <= victim["uid"] < FIRST_UID + UIDS and victim["gid"] == victim["uid"]
    assert victim["groups"] == [GROUP]  # its own group is its primary one
    entries = rt.run_dir / "gates" / f"gpu0.gate.{victim['tenant']}"
    assert (entries.stat().st_uid, entries.stat().st_mode & 0o777) == (victim["uid"], 0o600)
    with Gate.attach(rt.run_dir / "gates" / "gpu0.gate") as gate:
        # An entry naming a process of another uid (written here as its own
        # tenant could) is not believed: the runtime never drains or locks it.
        for name, value in (("pid", 1), ("start_time", 0), ("in_call", 1), ("state", gate_layout.PROC_LIVE)):
            gate._pget(int(victim["tenant"]), 3, name).value = value
        assert [e.pid for e in gate.processes()] == []
    report = rt.run_dir / "tenant-reports" / f"{victim_id}.unprotected"  # the runtime's pipe, for its uid's group
    st = report.stat()
    assert stat.S_ISFIFO(st.st_mode) and (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, victim["gid"], 0o620)
    # The simulated device is the runtime's, open to the tenants' group alone (it was 0666, owned by a tenant).
    device = Path(device_path(rt.device)).stat()
    assert (device.st_uid, device.st_gid, device.st_mode & 0o777) == (0, GROUP, 0o660)

    done = rt.krex("run", "--", PYTHON, "-c", ATTACKER, json.dumps(victim))
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    assert first.pop("uid") not in (victim["uid"], 0)
    assert first.pop("own_entries") == "ok"  # its own entries are its to write
    assert first == {
        "groups": [GROUP], "environ": "EACCES", "stdout_fd": "EACCES", "output_file": "EACCES",
        "signal": "EPERM", "entries": "EACCES", "report": "EACCES", "home": "EACCES", "header_rw": "EACCES",
        "mprotect": "EACCES",
    }
    assert second == {"header_write": -11}  # SIGSEGV: the gate's header is not a tenant's to write
    with Gate.attach(rt.run_dir / "gates" / "gpu0.gate", writable=False) as gate:
        assert not gate.is_closed and gate.holder == gate_layout.NO_HOLDER
    with rt.client() as c:
        assert c.call("status")["gpus"][0]["running"] == [victim_id]  # the victim was neither stopped nor killed

    # Its output streams to operators and its submitter, not to another local user.
    with Client(f"ipc://{rt.run_dir}/control-ro.sock", timeout=10) as c:
        assert c.call("wait", {"id": victim_id, "attach": True})["id"] == victim_id  # root: an operator
    stranger = _as_uid(FIRST_UID + UIDS + 5, lambda: _try_wait(rt.run_dir, victim_id))
    assert stranger.startswith("forbidden: the output of ") and "streams only to its submitter" in stranger

    assert rt.krex("cancel", victim_id).returncode == 0
    wait_until(lambda: not _running_as_range(), 30, "no process left under the tenants' uids")
    assert not entries.exists()
    assert not list((rt.run_dir / "tenant-homes").glob("*"))


def _try_wait(run_dir: Path, command_id: str) -> str:
    try:
        with Client(f"ipc://{run_dir}/control-ro.sock", timeout=10) as c:
            c.call("wait", {"id": command_id, "attach": True})
    except RequestFailed as exc:
        return f"{exc.code}: {exc}"
    return "streamed"


def _as_uid(uid: int, fn: Any) -> str:
    """`fn()` in a forked child running as `uid` (no account needed)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            result = fn()
        except BaseException as exc:
            result = f"raised {exc!r}"
        os.write(write_end, result.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read().decode()
    os.waitpid(pid, 0)
    return data


@pytest.mark.parametrize(
    "tenants, line",
    [
        ("uid_range = [1, 10]\ngroup = \"60999\"", "tenants.uid_range 1..10 holds the account 'daemon': its uids must be unused"),
        (f"uid_range = [{FIRST_UID}, {UIDS}]", "tenants.uid_range needs tenants.group (or tenants.user"),
        (f"uid_range = [{FIRST_UID}]\ngroup = \"{GROUP}\"", "tenants.uid_range is [first uid, how many]"),
        (f"uid_range = [{FIRST_UID}, 3]\ngroup = \"{GROUP}\"",
         "tenants.uid_range has 3 uids, fewer than the 4 tenants this node can run at once"),
    ],
)
def test_a_uid_range_that_cannot_work_is_one_line(tmp_path: Path, tenants: str, line: str) -> None:
    rt = Runtime(tmp_path / "rt", tenants_extra=tenants)
    rt.root.mkdir(parents=True)
    rt.write_config()
    done = subprocess.run([*command("krex-runtime"), "--config", str(rt.config_path), "--sim", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 125 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert line in done.stderr


# What a tenant tries against `other` (and itself), each try's errno name or "ok".
TRIES = r"""
def attempts(found, tries):
    for name, fn in tries:
        try:
            fn()
            found[name] = "ok"
        except OSError as exc:
            found[name] = errno.errorcode[exc.errno]
    print(json.dumps(found))
"""

POOLED = r"""
import errno, json, os, signal, sys
""" + TRIES + r"""
pids = [int(p) for p in sys.argv[1:]]
own = os.getpid() if os.getpid() in pids else os.getppid()  # the context process it runs in
other = next(p for p in pids if p != own)
attempts({"uid": os.getuid(), "worker_uid": os.stat(f"/proc/{own}").st_uid},
         (("environ", lambda: open(f"/proc/{other}/environ", "rb").read()),
          ("signal", lambda: os.kill(other, signal.SIGSTOP))))
"""


FORKED = r"""
import errno, json, os, signal, sys
""" + TRIES + r"""
other = int(sys.argv[1])
attempts({"uid": os.getuid(), "zygote_uid": os.stat(f"/proc/{os.getppid()}").st_uid},
         (("own_environ", lambda: open("/proc/self/environ", "rb").read()),
          ("environ", lambda: open(f"/proc/{other}/environ", "rb").read()),
          ("signal", lambda: os.kill(other, signal.SIGSTOP))))
"""


def test_context_processes_and_forked_commands_have_uids_of_their_own(open_root: Path, make_runtime: Any) -> None:
    """Each context process runs as its own uid, and so do the commands it runs;
    a forked command takes its own uid as the zygote's child. None can read or
    signal another. The runtime runs under a Python every uid may run (its
    context processes and zygote run the runtime's own interpreter)."""
    site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    rt = make_runtime(
        parent=open_root, policy="krex", sim=1, tenants_extra=_uid_range(),
        extra_config="[pool]\nsize_per_gpu = 2\nzygote = true\n",
        runtime_argv=(PYTHON, "-m", "krex_runtime.main"),
        runtime_env={"PYTHONPATH": os.pathsep.join([str(site), str(Path(__file__).parents[2])])},
    )

    def workers() -> dict[str, Any]:
        with rt.client() as c:
            found = c.call("snapshot")["state"]["gpus"][0]["pool"]["workers"]
            zygote = c.call("status")["gpus"][0]["zygote"].get("state")
        return found if sum(w["state"] == "idle" for w in found.values()) == 2 and zygote == "ready" else {}

    pids = [w["pid"] for w in wait_until(workers, 120, "two warm context processes").values()]
    uids = [os.stat(f"/proc/{pid}").st_uid for pid in pids]
    assert len(set(uids)) == 2 and all(FIRST_UID <= u < FIRST_UID + UIDS for u in uids)
    done = rt.krex("run", "--mode", "pooled", "--", "python", "-c", POOLED, str(pids[0]), str(pids[1]))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found.pop("uid") == found.pop("worker_uid") in uids  # a pooled command runs as its context process
    assert found == {"environ": "EACCES", "signal": "EPERM"}  # and cannot reach the other one

    done = rt.krex("run", "--mode", "forked", "--", "python", "-c", FORKED, str(pids[0]))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert FIRST_UID <= found.pop("uid") < FIRST_UID + UIDS and found.pop("zygote_uid") == 0
    assert found == {"own_environ": "ok", "environ": "EACCES", "signal": "EPERM"}


def test_a_uid_comes_back_only_with_nothing_left_running_as_it(tmp_path: Path) -> None:
    """The pool of uids on its own: one uid, taken, exhausted, given back with a
    leftover process running as it, which is killed; its home goes too."""
    uids = Identities(FIRST_UID + UIDS, 1, GROUP, tmp_path)
    identity = uids.take()
    assert identity is not None and identity.home.is_dir() and identity.home.stat().st_uid == identity.uid
    assert uids.take() is None  # never two live tenants on one uid
    leftover = subprocess.Popen(["sleep", "60"], user=identity.uid, group=identity.gid, extra_groups=[])
    wait_until(lambda: processes_of(identity.uid) == [leftover.pid], 10, "the leftover runs as the uid")
    uids.give_back(identity)
    assert leftover.wait(timeout=10) == -9 and not identity.home.exists()
    again = uids.take()
    assert again is not None and again.uid == identity.uid
    uids.give_back(again)
    uids.close()
    assert not (tmp_path / "tenant-homes").exists()
