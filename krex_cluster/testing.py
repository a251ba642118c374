"""A KREX cluster on this machine, for tests and the router benchmark: a Ray
cluster of `ray.cluster_utils.Cluster` nodes, each labelled as a KREX node
whose agent starts its own runtime on simulated GPUs (its config written as
krex_runtime.testing writes a test runtime's), and the gateway
(`krex-cluster head`) as a process of its own, restartable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from krex_runtime.api import Client
from krex_runtime.testing.hygiene import open_fds
from krex_runtime.testing.local_runtime import Runtime, wait_until

# n1 and n2 alike, n3 apart; `host` pins a command to one node.
NODE_LABELS = {name: {"zone": zone, "host": name} for name, zone in (("n1", "a"), ("n2", "a"), ("n3", "b"))}


@dataclass
class KrexCluster:
    root: Path
    labels: dict[str, dict[str, str]] = field(default_factory=lambda: dict(NODE_LABELS))
    slots: int = 4
    sim: int = 2
    # n3 runs policy krex (regions, certificates); a node not named here gets Runtime's default (ungated)
    policies: dict[str, str] = field(default_factory=lambda: {"n3": "krex"})
    ray: Any = None  # the ray.cluster_utils.Cluster
    ray_nodes: dict[str, Any] = field(default_factory=dict)
    runtimes: dict[str, Runtime] = field(default_factory=dict)  # their configs and folders (the agents start them)
    gateway: subprocess.Popen[bytes] | None = None
    fds: dict[str, tuple[int, dict[int, str]]] = field(default_factory=dict)  # node -> (runtime pid, its descriptors)

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.root / 'gateway' / 'control.sock'}"

    @property
    def telemetry(self) -> str:
        return f"ipc://{self.root / 'gateway' / 'telemetry.sock'}"

    @property
    def config_path(self) -> Path:
        return self.root / "cluster.toml"

    def start(self) -> KrexCluster:
        from ray.cluster_utils import Cluster

        self.root.mkdir(parents=True, exist_ok=True)
        self.ray = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        lines = ["[gateway]", f'run_dir = "{self.root / "gateway"}"', f'ray_address = "{self.ray.address}"',
                 "membership_interval_s = 0.5", ""]
        for name, labels in self.labels.items():
            label_text = ", ".join(f'{k} = "{v}"' for k, v in labels.items())
            policy: dict[str, Any] = {"policy": self.policies[name]} if name in self.policies else {}
            rt = Runtime(self.root / name, sim=self.sim, slots=self.slots, keep_finished=200, **policy,
                         runtime_extra=f"labels = {{ {label_text} }}")
            rt.root.mkdir(parents=True, exist_ok=True)
            rt.write_config()
            self.runtimes[name] = rt
            lines += [f"[nodes.{name}]", 'runtime = "start"', f"sim = {self.sim}", f'config = "{rt.config_path}"',
                      f'log = "{rt.log_path}"', "restart_delay_s = 0.5", ""]
            self.add_node(name)
        self.config_path.write_text("\n".join(lines))
        self.ray.wait_for_nodes()
        self.start_gateway()
        self.wait_all_up()
        return self

    def add_node(self, name: str) -> None:
        self.ray_nodes[name] = self.ray.add_node(num_cpus=1, labels={"krex-node": name}, wait=False)

    def remove_node(self, name: str) -> None:
        self.ray.remove_node(self.ray_nodes.pop(name))

    def start_gateway(self) -> None:
        log = (self.root / "gateway.log").open("ab")
        self.gateway = subprocess.Popen(
            [sys.executable, "-m", "krex_cluster.main", "head", "--config", str(self.config_path)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RAY_DEDUP_LOGS": "0"},
        )
        wait_until(self._gateway_answers, 60, "the gateway to answer", interval_s=0.1)

    def _gateway_answers(self) -> bool:
        assert self.gateway is not None
        if self.gateway.poll() is not None:
            raise AssertionError(f"the gateway exited with {self.gateway.returncode}:\n{self.gateway_log()}")
        try:
            with Client(self.endpoint, timeout=1.0) as c:
                return bool(c.call("hello").get("cluster"))
        except Exception:
            return False

    def stop_gateway(self, sig: int = signal.SIGTERM) -> int:
        assert self.gateway is not None
        self.gateway.send_signal(sig)
        try:
            return self.gateway.wait(60)
        except subprocess.TimeoutExpired:
            self.gateway.kill()
            return self.gateway.wait()

    def gateway_log(self) -> str:
        path = self.root / "gateway.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def client(self, timeout: float = 30.0) -> Client:
        return Client(self.endpoint, timeout=timeout)

    def rows(self) -> dict[str, dict[str, Any]]:
        with self.client() as c:
            return {r["name"]: r for r in c.call("status")["cluster"]["nodes"]}

    def wait_all_up(self, timeout_s: float = 90.0) -> None:
        try:
            wait_until(lambda: all(r["alive"] for r in self.rows().values()), timeout_s, "every node up", 0.25)
        except AssertionError:
            raise AssertionError(f"nodes not all up: {self.rows()}\n{self.gateway_log()}") from None

    def runtime_pid(self, name: str) -> int:
        return int(self.rows()[name]["status"]["pid"])

    def note_fds(self, name: str) -> None:
        """The descriptors of the node's runtime now (idle), to compare later."""
        pid = self.runtime_pid(name)
        self.fds[name] = (pid, open_fds(pid))

    def krex(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        from krex_runtime.testing.local_runtime import command

        return subprocess.run([*command("krex"), "--cluster", self.endpoint, *args],
                              capture_output=True, text=True, timeout=timeout)

    def stop_nodes(self) -> None:
        """Stop every agent's runtime (SIGTERM: each cancels and cleans up), through Ray."""
        import ray

        ray.init(address=self.ray.address, namespace="krex", include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        try:
            agents = []
            for name in self.runtimes:
                try:
                    agents.append(ray.get_actor(f"krex-agent:{name}", namespace="krex"))
                except ValueError:
                    continue
            ray.get([a.stop.remote() for a in agents], timeout=90)
            for agent in agents:
                ray.kill(agent)
        finally:
            ray.shutdown()

    def shutdown(self) -> list[str]:
        """Everything down, whatever state the tests left: gateway, agents and
        runtimes, Ray; then any runtime process of these folders still alive
        is killed, and named in what this returns."""
        survivors: list[str] = []
        try:
            if self.gateway is not None and self.gateway.poll() is None:
                self.stop_gateway()
            if self.ray is not None:
                try:
                    self.stop_nodes()
                except Exception:
                    pass  # they are killed below
        finally:
            if self.ray is not None:
                self.ray.shutdown()
            for proc in runtime_processes(self.root):
                survivors.append(f"runtime process {proc.pid} outlived its agent: {' '.join(proc.cmdline())[:200]}")
                proc.kill()
        return survivors


def runtime_processes(root: Path) -> list[psutil.Process]:
    """krex-runtime processes whose config lies under `root`."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if any("krex-runtime" in part or part == "krex_runtime.main" for part in cmdline[:3]) and any(
            str(root) in part for part in cmdline
        ):
            found.append(proc)
    return found


def results_by_label(results: list[Any]) -> dict[str, Any]:
    by_label: dict[str, Any] = {}
    for r in results:
        assert r.label not in by_label, f"{r.label} reported twice"
        by_label[r.label] = r
    return by_label


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    return wait_until(predicate, timeout_s, what, 0.1)


def now() -> float:
    return time.time()
