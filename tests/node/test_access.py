"""Access to the runtime's control plane, proven with real accounts, sockets and
processes: who may open which socket, tcp only with CURVE, tenants refused
every changing request, and commands run as an unprivileged user."""

from __future__ import annotations

import asyncio
import errno
import grp
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
from runtime_helpers import REPO

from krex_console.feed import FeedStatus, LiveFeed
from krex_runtime.api import AsyncClient, Client
from krex_runtime.node import access
from krex_runtime.node.config import Config, RuntimeSection
from krex_runtime.testing.local_runtime import Runtime, command, wait_until
from krex_runtime.wire import endpoints, protocol
from krex_runtime.wire.control_client import (
    CLIENT_KEY_ENV,
    SERVER_KEY_ENV,
    ControlClient,
    RequestFailed,
    RuntimeUnavailable,
    use_curve,
)
from krex_runtime.wire.trace import read_trace

KREX = command("krex")


# --- real accounts -------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]


@dataclass(frozen=True)
class Accounts:
    operators: str  # group
    watchers: str  # group
    operator: Account  # in `operators`
    watcher: Account  # in `watchers`
    stranger: Account  # in neither
    tenant: Account  # in neither: the user commands run as


@pytest.fixture(scope="module")
def accounts() -> Iterator[Accounts]:
    """Groups and unprivileged users made for this module and removed after it."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("groupadd"):
        pytest.skip("needs root, useradd and groupadd to make real accounts")
    tag = f"krxt{os.getpid()}"
    groups = {"operators": f"{tag}ops", "watchers": f"{tag}ro"}
    users = {"operator": "operators", "watcher": "watchers", "stranger": "", "tenant": ""}
    made_groups: list[str] = []
    made_users: list[str] = []
    try:
        for name in groups.values():
            subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
            made_groups.append(name)
        found: dict[str, Account] = {}
        for role, group in users.items():
            name = f"{tag}{role[:2]}"
            extra = ["-G", groups[group]] if group else []
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                 *extra, name],
                check=True, capture_output=True,
            )
            made_users.append(name)
            entry = pwd.getpwnam(name)
            found[role] = Account(name, entry.pw_uid, entry.pw_gid, tuple(os.getgrouplist(name, entry.pw_gid)))
        yield Accounts(groups["operators"], groups["watchers"], **found)
    finally:
        for name in made_users:
            subprocess.run(["userdel", name], capture_output=True)
        for name in made_groups:
            subprocess.run(["groupdel", name], capture_output=True)


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder every user may pass through (the test's own tmp_path is root's alone).
    Ask for it before make_runtime, so it outlives the runtimes in it."""
    path = Path(tempfile.mkdtemp(prefix="krex-access-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(account: Account, fn: Callable[[], Any]) -> Any:
    """Run `fn` in a forked child that has dropped to `account`; its JSON-able result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups(list(account.groups))
            os.setgid(account.gid)
            os.setuid(account.uid)
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
        raise AssertionError(f"as {account.name}: {result['error']}")
    return result["value"]


def connect(path: Path) -> Callable[[], str]:
    """A raw connect to a Unix socket: "connected" or the errno name."""

    def attempt() -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(path))
            except OSError as exc:
                return errno.errorcode[exc.errno]
        return "connected"

    return attempt


def call(endpoint: str, type_: str, body: dict[str, Any] | None = None) -> Callable[[], str]:
    """A request through the real client: "ok", the error code, or why there was no reply."""

    def attempt() -> str:
        try:
            with ControlClient(endpoint, timeout_s=10) as client:
                client.call(type_, body)
        except RequestFailed as exc:
            return exc.code
        except RuntimeUnavailable as exc:
            return f"unavailable: {exc}"
        return "ok"

    return attempt


def mode_of(path: Path) -> tuple[int, int, int]:
    info = os.stat(path)
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid


# --- 1. socket ownership and groups ------------------------------------------------------


def test_run_dir_modes_for_each_kind_of_access() -> None:
    def mode(runtime: dict[str, str], apart: bool = False) -> int:
        config = Config(runtime=RuntimeSection(**runtime))
        return access.run_dir_access(config, apart).mode

    root_group = grp.getgrgid(0).gr_name
    assert mode({}) == 0o700
    assert mode({"access_group": root_group}) == 0o2750
    assert mode({"read_only_group": root_group}) == 0o2750
    assert mode({"access_group": root_group, "read_only_group": "*"}) == 0o2751
    assert mode({}, apart=True) == 0o701
    with pytest.raises(access.AccessError, match="unknown group 'no-such-group-krex'"):
        mode({"access_group": "no-such-group-krex"})


def test_operators_group_and_world_readable_read_only_socket(accounts: Accounts, open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, runtime_extra=f'access_group = "{accounts.operators}"\nread_only_group = "*"')
    ops_gid = grp.getgrnam(accounts.operators).gr_gid
    assert mode_of(rt.run_dir) == (0o2751, 0, ops_gid)
    assert mode_of(rt.run_dir / endpoints.CONTROL_SOCKET) == (0o660, 0, ops_gid)
    assert mode_of(rt.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET)[:2] == (0o666, 0)
    assert mode_of(rt.run_dir / endpoints.TELEMETRY_SOCKET)[:2] == (0o666, 0)
    assert stat.S_IMODE(os.stat(rt.trace_path).st_mode) & 0o007 == 0
    control = endpoints.control(rt.run_dir)
    read_only = endpoints.control_read_only(rt.run_dir)

    assert as_user(accounts.operator, connect(rt.run_dir / endpoints.CONTROL_SOCKET)) == "connected"
    assert as_user(accounts.operator, call(control, "pause")) == "ok"
    assert as_user(accounts.operator, call(control, "resume")) == "ok"

    assert as_user(accounts.stranger, connect(rt.run_dir / endpoints.CONTROL_SOCKET)) == "EACCES"
    assert "permission denied" in as_user(accounts.stranger, call(control, "hello"))
    assert as_user(accounts.stranger, call(read_only, "status")) == "ok"
    assert as_user(accounts.stranger, call(read_only, "pause")) == protocol.ErrorCode.REFUSED
    # `ls` is anyone's who may read; `logs` only its submitter's and operators' (as streaming is).
    theirs = json.loads(rt.krex("run", "--json", "--", "echo", "private").stdout)["id"]
    assert as_user(accounts.stranger, call(read_only, "ls")) == "ok"
    assert as_user(accounts.stranger, call(read_only, "logs", {"id": theirs})) == protocol.ErrorCode.FORBIDDEN
    assert as_user(accounts.operator, call(control, "logs", {"id": theirs})) == "ok"
    with rt.client() as c:
        assert c.call("status")["paused"] is False


def test_read_only_group_and_an_owner_only_control_socket(accounts: Accounts, open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, runtime_extra=f'read_only_group = "{accounts.watchers}"')
    watchers = grp.getgrnam(accounts.watchers).gr_gid
    assert mode_of(rt.run_dir) == (0o2750, 0, watchers)
    assert mode_of(rt.run_dir / endpoints.CONTROL_SOCKET)[:2] == (0o600, 0)
    assert mode_of(rt.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET) == (0o660, 0, watchers)
    assert mode_of(rt.run_dir / endpoints.TELEMETRY_SOCKET) == (0o660, 0, watchers)

    assert as_user(accounts.watcher, call(endpoints.control_read_only(rt.run_dir), "status")) == "ok"
    assert as_user(accounts.watcher, connect(rt.run_dir / endpoints.TELEMETRY_SOCKET)) == "connected"
    assert as_user(accounts.watcher, connect(rt.run_dir / endpoints.CONTROL_SOCKET)) == "EACCES"
    for account in (accounts.stranger, accounts.operator):
        assert as_user(account, connect(rt.run_dir / endpoints.CONTROL_READ_ONLY_SOCKET)) == "EACCES"
    closed = as_user(accounts.stranger, call(endpoints.control_read_only(rt.run_dir), "status"))
    assert closed.endswith("control-ro.sock: its folder is closed to you")


# --- 2. tcp only with CURVE ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_keys(folder: Path, name: str) -> tuple[Path, Path]:
    done = subprocess.run([*KREX, "keys", "create", str(folder), "--name", name], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder / f"{name}.key", folder / f"{name}.key_secret"


def test_tcp_admits_only_authorized_curve_keys(make_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "keys"
    server_public, server_secret = make_keys(keys, "server")
    agent_public, agent_secret = make_keys(keys, "agent")
    _, intruder_secret = make_keys(keys, "intruder")
    assert stat.S_IMODE(server_secret.stat().st_mode) == 0o600
    clients = tmp_path / "clients"
    clients.mkdir()
    shutil.copy(agent_public, clients)
    control, telemetry = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    rt = make_runtime(runtime_extra=(
        f'control_tcp = "{control}"\ntelemetry_tcp = "{telemetry}"\n'
        f'curve_server_key = "{server_secret}"\ncurve_clients = "{clients}"'
    ))
    monkeypatch.setenv(SERVER_KEY_ENV, str(server_public))

    monkeypatch.setenv(CLIENT_KEY_ENV, str(agent_secret))
    with ControlClient(control, timeout_s=10) as client:
        assert client.call("hello")["read_only"] is False
        client.call("pause")
        assert client.call("status")["paused"] is True
        client.call("resume")
    sub = zmq.Context.instance().socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, protocol.TOPIC_SNAPSHOT)
        use_curve(sub, telemetry)
        sub.connect(telemetry)
        assert sub.poll(10_000), "no snapshot over CURVE telemetry"
        assert sub.recv_multipart()[0] == protocol.TOPIC_SNAPSHOT
    finally:
        sub.close(linger=0)

    assert asyncio.run(console_feed_status(control, telemetry)) == FeedStatus.LIVE

    monkeypatch.setenv(CLIENT_KEY_ENV, str(intruder_secret))
    with ControlClient(control) as client, pytest.raises(RuntimeUnavailable, match="refused this client's CURVE key"):
        client.send("hello")  # told here already where the handshake has failed by then,
        client.receive(30.0)  # else not answered, and told why at once
    # The API clients too: they used to wait forever in a send with no connection left.
    refused = "refused this client's CURVE key"
    with pytest.raises(RuntimeUnavailable, match=refused), Client(control, timeout=30) as api:
        api.status()
    with pytest.raises(RuntimeUnavailable, match=refused), Client(control, timeout=30) as api:
        api.submit(["true"]).wait(timeout=60)
    assert asyncio.run(async_status(control)) == refused
    wrong_server = {"curve_client_key": agent_secret, "curve_server_key": agent_public}
    with pytest.raises(RuntimeUnavailable, match=r"handshake .* failed"), Client(control, timeout=30, **wrong_server) as api:
        api.status()
    plain = zmq.Context.instance().socket(zmq.DEALER)
    try:
        plain.connect(control)
        plain.send(protocol.encode(protocol.request("hello")))
        assert not plain.poll(2000), "a client without CURVE was answered"
    finally:
        plain.close(linger=0)
    monkeypatch.delenv(CLIENT_KEY_ENV)
    with pytest.raises(RuntimeUnavailable, match=CLIENT_KEY_ENV):
        ControlClient(control)
    done = rt.krex("--curve-client-key", str(agent_secret), "--endpoint", control, "status", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["paused"] is False


async def async_status(control: str) -> str:
    """What AsyncClient.status raises on this endpoint, from its message."""
    async with AsyncClient(control, timeout=30) as api:
        try:
            await api.status()
        except RuntimeUnavailable as exc:
            return "refused this client's CURVE key" if "refused this client's CURVE key" in str(exc) else str(exc)
    return "answered"


async def console_feed_status(control: str, telemetry: str) -> str:
    """The console's live feed on tcp endpoints: its status once it holds the node's state."""
    feed = LiveFeed(control, telemetry, lambda message: None)
    task = asyncio.create_task(feed.run())
    try:
        for _ in range(400):
            if feed.status == FeedStatus.LIVE and feed.state.gpus:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    return feed.status


def start_fails(rt: Runtime, edit: Callable[[str], str] = lambda text: text) -> str:
    """Start a runtime that must refuse: its one line on stderr."""
    rt.root.mkdir(parents=True, exist_ok=True)
    rt.write_config()
    rt.config_path.write_text(edit(rt.config_path.read_text()))
    done = subprocess.run(
        [*command("krex-runtime"), "--config", str(rt.config_path), "--sim", "1"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 125, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_start_up_refusals(tmp_path: Path) -> None:
    tcp = f'control_tcp = "tcp://127.0.0.1:{free_port()}"'
    line = start_fails(Runtime(tmp_path / "tcp", runtime_extra=tcp))
    assert line.startswith("krex-runtime: runtime.control_tcp is served only with CURVE: set runtime.curve_server_key")

    keys = tmp_path / "keys"
    _, secret = make_keys(keys, "server")
    secret.chmod(0o644)
    curve = f'{tcp}\ncurve_server_key = "{secret}"\ncurve_clients = "{keys}"'
    line = start_fails(Runtime(tmp_path / "open-key", runtime_extra=curve))
    assert line == f"krex-runtime: runtime.curve_server_key {secret} is open to other users (mode 0644): chmod 600 it"

    line = start_fails(Runtime(tmp_path / "nobody-known", tenant_user="no-such-user-krex"))
    assert line == "krex-runtime: tenants.user names an unknown user 'no-such-user-krex'"


def test_a_tenant_user_among_the_operators_is_refused(accounts: Accounts, tmp_path: Path) -> None:
    rt = Runtime(tmp_path / "rt", tenant_user=accounts.operator.name, runtime_extra=f'access_group = "{accounts.operators}"')
    assert start_fails(rt) == (
        f"krex-runtime: tenants.user {accounts.operator.name!r} is a member of runtime.access_group "
        f"{accounts.operators!r}: its commands could reach the control socket"
    )


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
        "from krex_runtime.wire.control_client import ControlClient, RequestFailed\n"
        "with ControlClient(f\"ipc://{os.environ['KREX_RUN_DIR']}/control.sock\") as c:\n"
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
        line = start_fails(Runtime(open_root / "refused", tenant_user=tenant.name, extra_config=pool))
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
