"""Where a submission goes: the pure placement of one command on one node.

No Ray, no sockets: the gateway builds a `NodeView` of every node from what
its agent last reported plus what the gateway itself has sent there since,
and asks `place`. Needs first (the node must be up and have the labels, the
GPU model and the mode), then load: a node with a free slot before one
without, a node whose pool or zygote is warm for the command's mode before a
cold one, then the lowest share of its slots taken, then the shortest region
queue, then the name (so equal nodes are chosen the same way every time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Needs:
    """What a command asks of a node (the submit body's fields)."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    gpu_model: str = ""  # a GPU whose name contains this, case-insensitive; "": any
    mode: str | None = None  # None: the node's default mode
    gpu: int | None = None  # a GPU index the node must have


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    slots: int
    running: int = 0
    queued: int = 0
    region_queue: int = 0
    paused: bool = False
    leased: bool = False
    pool_size: int = 0  # context processes of this GPU (pooled mode)
    pool_idle: int = 0
    zygote_ready: bool = False  # forked mode


@dataclass(frozen=True)
class NodeView:
    name: str
    alive: bool
    reason: str = ""  # why it is not alive
    labels: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[GpuView, ...] = ()
    paused: bool = False  # the whole node's admission
    default_mode: str = "process"
    zygotes: bool = False  # pool.zygote: forked mode offered
    outstanding: int = 0  # commands sent there that have not ended (the gateway's own count: always current)


class NoPlacement(Exception):
    """No node can take the command now. `ever` False: no node known to the
    cluster could ever meet its needs (refuse it); True: one could, once it
    is back up or admits again (hold it)."""

    def __init__(self, reason: str, ever: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.ever = ever


def unmet(needs: Needs, node: NodeView) -> str:
    """Why `node` can never run a command with these needs ("" when it can)."""
    missing = {k: v for k, v in needs.node_labels.items() if node.labels.get(k) != v}
    if missing:
        return "lacks " + ", ".join(f"{k}={v}" for k, v in sorted(missing.items()))
    gpus = _gpus_for(needs, node)
    if not node.gpus:
        return "no GPUs known yet" if not node.alive else "no GPUs"
    if not gpus:
        if needs.gpu is not None and not any(g.index == needs.gpu for g in node.gpus):
            return f"no GPU {needs.gpu}"
        return f"no GPU named like {needs.gpu_model!r} (has {', '.join(sorted({g.name for g in node.gpus}))})"
    mode = needs.mode or node.default_mode
    if mode == "pooled" and not any(g.pool_size for g in gpus):
        return "no context pool (pooled mode)"
    if mode == "forked" and not node.zygotes:
        return "no zygotes (forked mode)"
    return ""


def _gpus_for(needs: Needs, node: NodeView) -> list[GpuView]:
    model = needs.gpu_model.lower()
    return [
        g for g in node.gpus
        if (needs.gpu is None or g.index == needs.gpu) and (not model or model in g.name.lower())
    ]


def _warm(needs: Needs, node: NodeView, gpus: Sequence[GpuView]) -> bool:
    """A command of this mode starts there without waiting for a warm-up."""
    mode = needs.mode or node.default_mode
    if mode == "pooled":
        return any(g.pool_idle for g in gpus)
    if mode == "forked":
        return any(g.zygote_ready for g in gpus)
    return True  # a process command needs nothing warm


def score(needs: Needs, node: NodeView) -> tuple[bool, bool, float, int, str]:
    """Lower is better: (no free slot, not warm, share of slots taken, region queue, name)."""
    gpus = [g for g in _gpus_for(needs, node) if not g.paused and not g.leased]
    slots = sum(g.slots for g in gpus)
    # What the gateway sent there and has not seen end counts fully; the
    # node's own queue (commands from elsewhere) adds to it.
    own_queue = sum(g.queued for g in gpus)
    taken = max(node.outstanding, sum(g.running for g in gpus) + own_queue)
    load = taken / slots if slots else float("inf")
    return (taken >= slots, not _warm(needs, node, gpus), load, sum(g.region_queue for g in gpus), node.name)


def place(needs: Needs, nodes: Sequence[NodeView]) -> str:
    """The name of the node to run a command on; NoPlacement when none can now."""
    if not nodes:
        raise NoPlacement("the cluster has no nodes", ever=False)
    why = {n.name: unmet(needs, n) for n in nodes}
    capable = [n for n in nodes if not why[n.name]]
    if not capable:
        detail = "; ".join(f"{name}: {reason}" for name, reason in sorted(why.items()))
        # A node that is down may not have told its GPUs yet: it could still meet them.
        unknown = [n for n in nodes if not n.alive and not n.gpus and not why[n.name].startswith("lacks")]
        raise NoPlacement(f"no node meets the command's needs ({detail})", ever=bool(unknown))
    ready = [n for n in capable if n.alive and not n.paused and _admitting(needs, n)]
    if not ready:
        detail = "; ".join(
            f"{n.name}: {'down (' + (n.reason or 'unknown') + ')' if not n.alive else 'not admitting'}"
            for n in sorted(capable, key=lambda n: n.name)
        )
        raise NoPlacement(f"every node that meets the command's needs is unavailable ({detail})", ever=True)
    return min(ready, key=lambda n: score(needs, n)).name


def _admitting(needs: Needs, node: NodeView) -> bool:
    return any(not g.paused and not g.leased for g in _gpus_for(needs, node))
