"""Running the runtime as a service: systemd's notification protocol (READY,
WATCHDOG) over a socket the test binds, the Prometheus endpoint scraped
during a simulated workload, and the post-stop recovery after the runtime
was killed with tenants frozen inside a region."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from region_checks import check_nothing_left
from runtime_helpers import (
    NO_WATCHDOG,
    PY,
    REPO,
    TENANTS,
    busy,
    cgroup_root,
    finish,
    frozen_cgroups,
    gpu_state,
    regions_config,
    submit,
    tenant_processes,
    wait_ready,
)

from krex_runtime.main import parse_args
from krex_runtime.regions.gate.core import Gate
from krex_runtime.regions.machinery import gate_path
from krex_runtime.service.notify import Notifier
from krex_runtime.testing.local_runtime import command, wait_until


class FakeSystemd:
    """The notification socket systemd would bind: a datagram socket, abstract or a path."""

    def __init__(self, path: Path | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if path is None:
            name = f"krex-test-{uuid.uuid4().hex[:12]}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.sock.bind(str(path))
            self.address = str(path)
        self.sock.settimeout(0.2)
        self.messages: list[dict[str, str]] = []

    def received(self, key: str, value: str = "1") -> bool:
        try:
            while True:
                data = self.sock.recv(4096).decode()
                self.messages.append(dict(line.split("=", 1) for line in data.splitlines() if "=" in line))
        except (TimeoutError, BlockingIOError):
            pass
        return any(m.get(key) == value for m in self.messages)

    def close(self) -> None:
        self.sock.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _value(metrics: dict, name: str, **labels: str) -> float:
    matches = [v for have, v in metrics.get(name, []) if all(have.get(k) == x for k, x in labels.items())]
    assert len(matches) == 1, f"{name}{labels}: {metrics.get(name)}"
    return matches[0]


def test_notify_path_socket_and_no_socket(tmp_path: Path, monkeypatch) -> None:
    systemd = FakeSystemd(tmp_path / "notify")
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", systemd.address)
        monkeypatch.setenv("WATCHDOG_USEC", "2000000")
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))  # another process is watched: no pings from this one
        notifier = Notifier.from_environment()
        assert "NOTIFY_SOCKET" not in os.environ and "WATCHDOG_USEC" not in os.environ  # tenants inherit neither
        assert notifier.watchdog_s is None
        notifier.ready("serving")
        assert wait_until(lambda: systemd.received("READY", "1"), 10, "READY=1")
        notifier.close()
    finally:
        systemd.close()
    Notifier(None, None).ready("nobody listens")  # without NOTIFY_SOCKET: nothing, no error
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/path")
    monkeypatch.setenv("WATCHDOG_USEC", "not a number")
    odd = Notifier.from_environment()  # a warning, and no notifications
    assert odd.address is None and odd.watchdog_s is None
    gone = Notifier(str(tmp_path / "nobody"), 1.0)
    gone.ready("serving")  # nothing listens there: a warning, never an exception
    gone.close()


def test_ready_watchdog_and_metrics_during_a_workload(make_runtime) -> None:
    systemd, port = FakeSystemd(), _free_port()
    try:
        rt = make_runtime(
            policy="krex", sim=1, slots=8, canary=True,
            runtime_env={"NOTIFY_SOCKET": systemd.address, "WATCHDOG_USEC": "400000"},
            extra_config=f'prometheus_listen = "127.0.0.1:{port}"\n' + regions_config(),
        )
        assert wait_until(lambda: systemd.received("READY", "1"), 30, "READY=1")
        ready = next(m for m in systemd.messages if m.get("READY") == "1")
        assert ready["MAINPID"] == str(rt.proc.pid) and "serving 1 GPU" in ready["STATUS"]
        assert wait_until(lambda: systemd.received("WATCHDOG", "1"), 30, "WATCHDOG=1")
        assert _value(_scrape(port), "krex_region_wait_seconds_count", gpu="0") >= 0  # one series per GPU from the start

        others = [busy(rt) for _ in range(2)]
        wait_ready(rt, *others)
        holder = submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200", "--hold-s", "1000")
        wait_until(lambda: gpu_state(rt)["region_command"] == holder, 60, "the region to be granted")  # not the canary's
        held = _scrape(port)
        assert _value(held, "krex_region_held", gpu="0") == 1
        assert _value(held, "krex_gpu_frozen_tenants", gpu="0") >= 2  # the busy tenants (and the canary)
        assert _value(held, "krex_gpu_running_tenants", gpu="0") >= 3
        finish(rt, holder)
        done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "3")
        assert done.returncode == 0, done.stderr
        finish(rt, *others)
        wait_until(lambda: _value(_scrape(port), "krex_regions_granted_total", gpu="0") >= 4, 30, "the grants counted")
        wait_until(lambda: _scrape(port).get("krex_canary_inflation_inside_ratio"), 60, "a canary sample")
        # The canary takes short regions of its own: wait for a moment between two.
        def between_regions() -> dict | None:
            metrics = _scrape(port)
            return metrics if _value(metrics, "krex_region_held", gpu="0") == 0 else None

        after = wait_until(between_regions, 30, "no region held")
        assert _value(after, "krex_gpu_frozen_tenants", gpu="0") == 0
        assert _value(after, "krex_region_entry_seconds_count", gpu="0") >= 4
        assert 0 < _value(after, "krex_region_entry_seconds_sum", gpu="0") < 60
        assert _value(after, "krex_region_hold_seconds_count", gpu="0") >= 4
        assert _value(after, "krex_region_wait_seconds_count", gpu="0") >= 4
        assert _value(after, "krex_commands_ended_total", state="finished") >= 1
        assert _value(after, "krex_commands_ended_total", state="cancelled") >= 3
        assert _value(after, "krex_commands_submitted_total") >= 5
        assert _value(after, "krex_gpu_sm_clock_hertz", gpu="0") > 1e8  # hundreds of MHz at least
        assert 0 <= _value(after, "krex_gpu_utilization_ratio", gpu="0") <= 1
        assert _value(after, "krex_gpu_parked_tenant_threads", gpu="0") >= 0
        assert _value(after, "krex_queued_commands") == 0
        assert -1 < _value(after, "krex_canary_inflation_inside_ratio", gpu="0") < 10
        assert _value(after, "krex_region_clock_cost_ratio", gpu="0") == 0  # the simulated GPU held its top clock
        assert _value(after, "krex_pool_workers", gpu="0", state="idle") == 0
        assert _value(after, "krex_runtime_info", policy="krex") == 1
        assert _status(f"http://127.0.0.1:{port}/") == 404
    finally:
        systemd.close()


def test_post_stop_recovery_after_the_runtime_was_killed(make_runtime) -> None:
    rt = make_runtime(policy="krex", sim=1, slots=8, extra_config=regions_config(), runtime_extra=NO_WATCHDOG)
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--kernel-us", "200", "--hold-s", "1000")
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None, 60, "the region to be granted")
    root = cgroup_root(rt)
    assert len(frozen_cgroups(root)) == 2
    rt.stop(signal.SIGKILL)
    with Gate.attach(gate_path(rt.run_dir, 0)) as gate:  # the view a parked tenant has of it
        assert gate.is_closed
        assert len(frozen_cgroups(root)) == 2  # the freeze outlives the runtime
        done = subprocess.run(
            [*command("krex-runtime"), "--recover"], env={**os.environ, "KREX_CONFIG": str(rt.config_path)},
            capture_output=True, text=True, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "recovery: reopened gpu0.gate" in done.stderr
        assert sum(1 for line in done.stderr.splitlines() if "recovery: thawed" in line) == 3, done.stderr
        assert not gate.is_closed
    assert frozen_cgroups(root) == []
    check_nothing_left(rt.run_dir)
    for p in tenant_processes(rt.run_dir):  # what systemd's stop kills before ExecStopPost= runs
        p.kill()
    wait_until(lambda: tenant_processes(rt.run_dir) == [], 30, "the tenants to end")
    recover = [*command("krex-runtime"), "--config", str(rt.config_path), "--recover"]

    def slice_removed() -> bool:
        assert subprocess.run(recover, capture_output=True, text=True, timeout=60).returncode == 0
        return root is None or not root.exists()

    wait_until(slice_removed, 30, "the empty command cgroups and the slice removed", interval_s=0.5)
    last = subprocess.run(recover, capture_output=True, text=True, timeout=60)
    assert last.returncode == 0 and last.stderr == "", last.stderr  # nothing left to do


def test_recovery_after_a_clean_stop_does_nothing(runtime) -> None:
    assert runtime.stop() == 0
    done = subprocess.run([*command("krex-runtime"), "--config", str(runtime.config_path), "--recover"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_recovery_refuses_while_a_runtime_serves(runtime) -> None:
    done = subprocess.run([*command("krex-runtime"), "--config", str(runtime.config_path), "--recover"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 125
    assert "a runtime still serves it, nothing to recover" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_metrics_port_taken_or_malformed_is_one_line(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    base = f"[runtime]\nrun_dir = '{tmp_path}/run'\nlock_dir = '{tmp_path}/locks'\n[tenants]\nallow_root = true\n"
    try:
        for listen, expected in (
            (f"127.0.0.1:{port}", f"krex-runtime: cannot serve metrics on 127.0.0.1:{port}: Address already in use"),
            ("9400", 'telemetry.prometheus_listen must be "HOST:PORT"'),
            ("localhost:99999", 'telemetry.prometheus_listen must be "HOST:PORT"'),
        ):
            config = tmp_path / "krex.toml"
            config.write_text(base + f'[telemetry]\ncanary = false\nprometheus_listen = "{listen}"\n')
            done = subprocess.run([*command("krex-runtime"), "--config", str(config), "--sim", "1"],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 125, done.stderr
            assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    finally:
        taken.close()


def test_the_shipped_unit_uses_what_the_runtime_implements() -> None:
    unit: dict[str, list[str]] = {}
    for line in (REPO / "configs" / "systemd" / "krex-runtime.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            unit.setdefault(key, []).append(value)
    assert unit["Type"] == ["notify"] and unit["Delegate"] == ["yes"] and unit["WatchdogSec"]
    assert unit["Environment"] == ["KREX_CONFIG=/etc/krex/krex.toml"]
    for key in ("ExecStart", "ExecStopPost"):
        program, *args = unit[key][0].split()
        assert program.endswith("/bin/krex-runtime")
        parse_args(args)  # exits (125) on an option the runtime does not have
    assert "--recover" in unit["ExecStopPost"][0]


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze here")
    program = command("krex-runtime")
    if len(program) != 1:
        pytest.skip("krex-runtime is not installed as a script")
    text = (REPO / "configs" / "systemd" / "krex-runtime.service").read_text()
    unit = tmp_path / "krex-runtime.service"
    unit.write_text(text.replace("/opt/krex/venv/bin/krex-runtime", program[0]))  # it checks the program exists
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "krex-runtime.service" not in done.stderr, done.stderr


def test_a_runtime_that_never_answers_is_not_left_running(tmp_path: Path) -> None:
    """The test harness's start(): a runtime that does not answer in time is
    stopped, and the error says what the last try met (here: no socket yet)."""
    from krex_runtime.testing.local_runtime import Runtime

    rt = Runtime(tmp_path / "rt", runtime_argv=(PY, "-c", "import time; time.sleep(600)"), answer_timeout_s=1.0)
    with pytest.raises(AssertionError, match="control socket does not exist yet"):
        rt.start()
    assert rt.proc is not None and rt.proc.poll() is not None
