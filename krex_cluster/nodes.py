"""The cluster's nodes as the gateway sees them, and the Ray side of it:
which Ray node is which KREX node (its `krex-node` label), one detached
agent actor per node with hard node affinity, and how each one is read.

A node is down when its Ray node is gone ("raylet gone"), when its agent
cannot be reached ("agent gone: ..."), or when its agent says its runtime is
("runtime gone: ..."); it is up again once a new agent (or a new runtime
epoch of the same agent) answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from krex_cluster.agent import NodeAgent
from krex_cluster.config import AGENT_PREFIX, NODE_LABEL, ClusterConfig, NodeSpec
from krex_cluster.router import GpuView, NodeView

log = logging.getLogger("krex.cluster")

RemoteAgent = ray.remote(NodeAgent)


@dataclass
class NodeState:
    name: str
    spec: NodeSpec
    alive: bool = False
    reason: str = "no Ray node labelled yet"
    since: float = field(default_factory=time.time)
    epoch: int = 0
    ray_node: str = ""  # the Ray node id its agent is on
    agent: Any = None  # the actor handle; None while none is up
    info: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] | None = None
    status_seq: int = 0
    pump: asyncio.Task[None] | None = None
    outstanding: set[str] = field(default_factory=set)  # cluster ids sent here and not ended

    def row(self, with_status: bool = True) -> dict[str, Any]:
        """The node's row of the contract (CLUSTER-CONTRACT.md, `status`)."""
        row = {"name": self.name, "alive": self.alive, "since": self.since, "reason": self.reason,
               "labels": dict(self.info.get("labels") or {}), "gpus": len(self.info.get("gpus") or [])}
        if with_status:
            row["status"] = self.status if self.alive else None
        return row

    def view(self) -> NodeView:
        """What the router needs: the last status, and the gateway's own count."""
        status = self.status or {}
        gpus = status.get("gpus") or self.info.get("gpus") or []
        return NodeView(
            name=self.name, alive=self.alive and self.agent is not None, reason=self.reason,
            labels=dict(self.info.get("labels") or {}),
            gpus=tuple(_gpu_view(g) for g in gpus), paused=bool(status.get("paused")),
            zygotes=any((g.get("zygote") or {}).get("state") not in (None, "", "off") for g in gpus),
            outstanding=len(self.outstanding),
        )


def _gpu_view(g: dict[str, Any]) -> GpuView:
    pool = g.get("pool") or {}
    return GpuView(
        index=int(g.get("index", 0)), name=str(g.get("name", "")), slots=int(g.get("slots", 1)),
        running=len(g.get("running") or ()), queued=int(g.get("queued") or 0),
        region_queue=int(g.get("region_queue") or 0), paused=bool(g.get("paused")), leased=bool(g.get("leased")),
        pool_size=int(pool.get("size") or g.get("pool_size") or 0), pool_idle=int(pool.get("idle") or 0),
        zygote_ready=(g.get("zygote") or {}).get("state") == "ready",
    )


def ray_nodes_by_name() -> dict[str, str]:
    """KREX node name -> Ray node id, of the Ray nodes alive now."""
    found = {}
    for node in ray.nodes():
        name = (node.get("Labels") or {}).get(NODE_LABEL)
        if node.get("Alive") and name:
            found[name] = node["NodeID"]
    return found


def agent_on(config: ClusterConfig, state: NodeState, ray_node: str, log_path: str) -> Any:
    """The node's agent: the one already running (a gateway restarted), else a new one."""
    name = AGENT_PREFIX + state.name
    try:
        existing = ray.get_actor(name, namespace=config.gateway.namespace)
    except ValueError:
        existing = None
    if existing is not None:
        return existing
    return RemoteAgent.options(
        name=name, namespace=config.gateway.namespace, lifetime="detached", num_cpus=0, max_restarts=0,
        max_concurrency=1000, scheduling_strategy=NodeAffinitySchedulingStrategy(ray_node, soft=False),
    ).remote(state.name, dataclasses.asdict(state.spec), log_path)


def kill_agent(agent: Any) -> None:
    try:
        ray.kill(agent, no_restart=True)
    except Exception as exc:  # already gone with its node
        log.debug("agent already gone: %s", exc)
