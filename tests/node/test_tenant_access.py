"""What tenants may do, proven with real accounts and processes: tenants
refused every changing request (pooled and detached ones too), and commands
and context processes run as an unprivileged user, never silently as root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from real_accounts import Account, Accounts, mode_of
from runtime_helpers import REPO, start_refused

from krex_runtime.node.config import Config
from krex_runtime.testing.local_runtime import Runtime, command, wait_until
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.trace.jsonl import read_trace

KREX = command("krex")



# --- 3. tenants cannot call operator actions -------------------------------------------------


TENANT_SCRIPT = """
ctl="ipc://$KREX_RUN_DIR/control.sock"
krex() {{ {krex} --endpoint "$ctl" "$@"; }}
krex cancel {victim}; echo "cancel $?"
krex pause; echo "pause $?"
krex submit -- true; echo "submit $?"
krex status --json >/dev/null; echo "status $?"
krex wait --json {finished} >/dev/null; echo "wait $?"
krex logs {finished} >/dev/null; echo "logs $?"
krex ls --json >/dev/null; echo "ls $?"
env -i PATH="$PATH" {krex} --endpoint "$ctl" recycle 0; echo "scrubbed $?"
{krex} cancel {victim}; echo "default-endpoint $?"
"""


def tenant_try(rt: Runtime, script: str) -> tuple[dict[str, int], str]:
    """Run `script` as a command; the exit status of each attempt it echoes, and its stderr."""
    done = rt.krex("run", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return {k: int(v) for k, v in (line.split() for line in done.stdout.splitlines())}, done.stderr


def victim_and_finished(rt: Runtime) -> tuple[str, str]:
    finished = json.loads(rt.krex("run", "--json", "--", "true").stdout)["id"]
    victim = rt.krex("submit", "--", "sleep", "120").stdout.strip()
    return victim, finished


def test_a_tenant_is_refused_every_change_but_may_read(make_runtime: Any) -> None:
    rt = make_runtime(cgroups="off")
    victim, finished = victim_and_finished(rt)
    results, stderr = tenant_try(rt, TENANT_SCRIPT.format(krex=" ".join(KREX), victim=victim, finished=finished))
    krex_error = protocol.EXIT_KREX_ERROR
    assert results == {
        "cancel": krex_error, "pause": krex_error, "submit": krex_error, "status": 0, "wait": krex_error,
        "logs": krex_error, "ls": 0, "scrubbed": krex_error, "default-endpoint": krex_error,
    }, stderr
    assert stderr.count("[forbidden]") == 6, stderr
    # Another command's output is not a tenant's to read.
    assert "'streaming a command's output' is forbidden to tenants of this runtime" in stderr
    assert "'cancel' is forbidden to tenants of this runtime: process " in stderr
    assert "descends from process" in stderr  # the scrubbed one, known by its parent
    assert "'cancel' is refused on the read-only control socket [refused]" in stderr  # tenants' KREX_ENDPOINT
    with rt.client() as c:
        status = c.call("status")
        assert status["paused"] is False and status["totals"]["submitted"] == 3
    assert rt.krex("cancel", victim).returncode == 0  # the operator may


def test_a_detached_tenant_without_its_environment_is_known_by_its_cgroup(make_runtime: Any, tmp_path: Path) -> None:
    rt = make_runtime(cgroups="auto")
    with rt.client() as c:
        if c.call("status")["cgroups"] is None:
            pytest.skip("no writable cgroup hierarchy here")
    out = tmp_path / "detached.out"
    # setsid -f: a new session, reparented away from the command's tree; env -i: no KREX_ variables.
    script = (
        f'setsid -f sh -c \'env -i {" ".join(KREX)} --endpoint "ipc://$KREX_RUN_DIR/control.sock" pause 2>{out}.err; '
        f'echo $? >{out}\'\n'
        f'while [ ! -s {out} ]; do sleep 0.05; done\n'
    )
    done = rt.krex("run", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert out.read_text().strip() == str(protocol.EXIT_KREX_ERROR)
    assert "runs in a command cgroup of this runtime [forbidden]" in Path(f"{out}.err").read_text()
    with rt.client() as c:
        assert c.call("status")["paused"] is False


def test_a_pooled_command_is_refused_changes(make_runtime: Any, tmp_path: Path) -> None:
    rt = make_runtime(extra_config='\n[pool]\nsize_per_gpu = 1\npreload = ["krex_runtime.sim.simcuda"]\n', sim=1)
    script = tmp_path / "pause.py"
    script.write_text(
        "import os\n"
        "from krex_runtime.api import Client, RequestFailed\n"
        "with Client(f\"ipc://{os.environ['KREX_RUN_DIR']}/control.sock\") as c:\n"
        "    print(c.call('status')['paused'])\n"
        "    try:\n"
        "        c.call('pause')\n"
        "    except RequestFailed as exc:\n"
        "        print(exc.code, exc.reason)\n"
    )
    done = rt.krex("run", "--mode", "pooled", "--", sys.executable, str(script))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("forbidden 'pause' is forbidden to tenants of this runtime: process ")
    assert " belongs to pool-" in lines[1]


# --- 4. commands run unprivileged ---------------------------------------------------------------


def runs_as(account: Account, exe: str, code: str) -> bool:
    try:
        done = subprocess.run(
            [exe, "-c", code], user=account.uid, group=account.gid, extra_groups=[], env={"PYTHONPATH": str(REPO)},
            capture_output=True, cwd="/",
        )
    except OSError:  # not even executable by that user
        return False
    return done.returncode == 0


def tenant_python(account: Account) -> str:
    """An interpreter the tenant user can run with the krex client importable
    (the test's own may live where that user cannot reach, e.g. under /root)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if runs_as(account, exe, "import krex_runtime.client, krex_runtime.sim.simcuda"):
            return exe
    pytest.skip(f"no Python that {account.name} can run with {REPO} importable")


def krex_as_submitter(rt: Runtime, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**rt.env, "PYTHONPATH": str(REPO)}
    return subprocess.run([*KREX, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_commands_run_as_the_tenant_user(accounts: Accounts, open_root: Path, make_runtime: Any) -> None:
    tenant = accounts.tenant
    python = tenant_python(tenant)
    sim_log = open_root / "rt" / "sim.log"  # the simulator's execution log, which tenants append to
    sim_log.parent.mkdir()
    sim_log.touch()
    sim_log.chmod(0o666)
    rt = make_runtime(parent=open_root, policy="krex", tenant_user=tenant.name)
    assert mode_of(rt.run_dir) == (0o701, 0, 0)
    assert mode_of(rt.run_dir / "region.sock") == (0o660, 0, tenant.gid)
    assert mode_of(rt.run_dir / "gates") == (0o710, 0, tenant.gid)
    assert mode_of(rt.run_dir / "gates" / "gpu0.gate") == (0o640, 0, tenant.gid)  # the header: read-only to tenants

    done = krex_as_submitter(rt, open_root, "run", "--", "sh", "-c", "id -u; id -G; echo $HOME $USER")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [str(tenant.uid), str(tenant.gid), f"/nonexistent {tenant.name}"]

    attempts = (
        "import errno, socket, sys\n"
        "for path in sys.argv[1:]:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n"
        "        s.connect(path)\n"
        "        print('connected')\n"
        "    except OSError as exc:\n"
        "        print(errno.errorcode[exc.errno])\n"
    )
    sockets = [rt.run_dir / name for name in (endpoints.CONTROL_SOCKET, endpoints.CONTROL_READ_ONLY_SOCKET, "region.sock")]
    done = krex_as_submitter(rt, open_root, "run", "--", python, "-c", attempts, *map(str, sockets))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["EACCES", "EACCES", "connected"]

    regions = str(REPO / "tests" / "tenants" / "regions.py")
    done = krex_as_submitter(rt, open_root, "run", "--json", "--", python, regions, "--regions", "2", "--kernel-us", "200")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # one document, the command's output inside
    assert [json.loads(line)["region"] for line in result["stdout"].splitlines()[:2]] == [0, 1], result
    assert "cannot open" not in result["stderr"], result  # gated (not running ungated), and in the simulator's log
    assert result["region_count"] == 2
    command_id = result["id"]
    # Its interception library reached its count file (tenant-reports/) as the tenant user: the warm-up
    # timing before the regions is the one unprotected.
    assert result["unprotected_timings"] == 1, result
    assert mode_of(rt.run_dir / "tenant-reports") == (0o710, 0, tenant.gid)
    rt.stop()
    granted = [e for e in read_trace(rt.trace_path).events if e["type"] == "region_granted" and e.get("command_id") == command_id]
    assert len(granted) == 2


def test_context_processes_run_as_the_tenant_user(accounts: Accounts, open_root: Path, make_runtime: Any) -> None:
    tenant = accounts.tenant
    pool = '\n[pool]\nsize_per_gpu = 1\npreload = ["krex_runtime.sim.simcuda"]\nzygote = true\n'
    if not runs_as(tenant, sys.executable, "import krex_runtime"):
        # This Python lives where the tenant user cannot reach: the runtime
        # must say so at start rather than start context processes that fail.
        line = start_refused(Runtime(open_root / "refused", sim=1, tenant_user=tenant.name, extra_config=pool))
        assert line.startswith(f"krex-runtime: tenants.user {tenant.name!r} cannot read ")
        return
    rt = make_runtime(parent=open_root, tenant_user=tenant.name, extra_config=pool, sim=1)

    def workers() -> list[dict[str, Any]]:
        with rt.client() as c:
            return [w for w in c.call("snapshot")["state"]["gpus"][0]["pool"]["workers"].values() if w["state"] == "idle"]

    worker = wait_until(workers, 60, "a warm context process")[0]
    assert psutil.Process(worker["pid"]).uids().real == tenant.uid
    # The zygote too, and so each forked command, placed in its cgroup by the runtime.
    with rt.client() as c:
        wait_until(lambda: c.call("status")["gpus"][0]["zygote"].get("state") == "ready", 60, "the zygote")
    done = rt.krex("run", "--mode", "forked", "--", sys.executable, "-c", "import os; print(os.getuid())")
    assert done.returncode == 0 and done.stdout == f"{tenant.uid}\n", done.stderr


def test_root_refusal_names_the_file_the_key_and_a_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On real GPUs a runtime started as root refuses root tenants, and says
    where to change that and how to start with it; on simulated GPUs only it
    goes on, with a one-line notice."""
    from krex_runtime import main as runtime_main
    from krex_runtime.node.access import AccessError, tenant_user
    from krex_runtime.node.config import load_config
    from krex_runtime.node.gpus import simulated_gpus

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    path = tmp_path / "krex.toml"
    path.write_text("[runtime]\npolicy = 'krex'\n")
    for config, file in ((load_config(path), str(path)), (Config(), "/etc/krex/krex.toml")):
        with pytest.raises(AccessError) as refused:
            tenant_user(config)
        assert str(refused.value) == (
            f'tenants would run as root: in {file}, under [tenants], set user = "krex-tenant" '
            f"(an unprivileged account) or allow_root = true, then start krex-runtime --config {file}")

    sim = simulated_gpus(2, "root-test")
    allowed = runtime_main.root_on_simulator(Config(), sim)
    assert allowed.tenants.allow_root and tenant_user(allowed) is None
    real = [replace(g, simulated=False) for g in sim]
    assert runtime_main.root_on_simulator(Config(), real) == Config()


def test_root_on_simulated_gpus_runs_tenants_as_root_with_a_notice(tmp_path: Path, native_built: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs a runtime started as root")
    from runtime_helpers import stop_and_check

    class Unpermitted(Runtime):
        def write_config(self) -> None:
            super().write_config()
            self.config_path.write_text(self.config_path.read_text().replace("allow_root = true", "allow_root = false"))

    rt = Unpermitted(tmp_path / "rt", policy="krex", sim=1)
    rt.start()
    try:
        done = rt.krex("run", "--", "id", "-u")
        assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr
        notices = [line for line in rt.log_path.read_text().splitlines() if "notice" in line]
        assert notices == ["krex-runtime: notice: tenants run as root (allowed on simulated GPUs only; "
                           "on real GPUs set tenants.user)"], notices
    finally:
        stop_and_check(rt)
