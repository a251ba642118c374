"""A cluster trace: a directory holding one krex trace per node, read as one
history ordered by event time, each event tagged with its node.

A node's trace is a normal trace (docs/trace-format.md), segments and all,
laid out in the directory as either

    DIR/<node>.jsonl          (its numbered segments beside it: <node>.jsonl.1, ...)
    DIR/<node>/trace.jsonl    (a copy of the node's run dir, or of its trace folder)

The node's name is the file's (or folder's), not the header's `node`: the
header names the host, and several runtimes on one host (one per GPU, say)
share it, while the cluster knows each by a name of its own. The host stays
in `hosts`.

The merge keeps each node's own order (its `seq`) and orders events of
different nodes by `t`, ties in node-name order: every node's events are
already in time order as its runtime wrote them, so a k-way merge by `t`
is the history. Each node's trace is checked as `read_trace` checks it, so
whatever this returns replays node by node without error.

This lives in the wire, beside trace.py, rather than in the cluster package:
`krex trace DIR` (cli) and `krex-console --replay DIR` read it, and neither
may import the cluster layer (it needs Ray); krex_cluster.trace re-exports it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.wire.trace.jsonl import Trace, TraceError, read_trace
from krex_runtime.wire.trace.summary import summarize

SUFFIX = ".jsonl"
NODE_TRACE = "trace.jsonl"  # inside a node's folder


class ClusterTraceError(TraceError):
    """A cluster trace that cannot be read; one line that names the directory or file."""


@dataclass
class ClusterTrace:
    directory: Path
    nodes: dict[str, Trace]  # node name -> its trace, names sorted
    events: list[dict[str, Any]]  # every node's events by time, each with "node"
    paths: dict[str, Path] = field(default_factory=dict)  # node name -> the live file read
    hosts: dict[str, str] = field(default_factory=dict)  # node name -> its header's `node` (the host)

    def of_node(self, name: str) -> list[dict[str, Any]]:
        return self.nodes[name].events


def is_cluster_trace(path: Path) -> bool:
    """A directory is read as a cluster trace, a file as one node's trace."""
    return path.is_dir()


def node_traces(directory: Path) -> dict[str, Path]:
    """Node name -> the live file of its trace, for every node trace in `directory`."""
    if not directory.is_dir():
        raise ClusterTraceError(f"{directory}: not a directory of node traces")
    found: dict[str, Path] = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise ClusterTraceError(f"{directory}: cannot list it: {exc.strerror}") from None
    for entry in entries:
        if entry.is_file() and entry.name.endswith(SUFFIX) and len(entry.name) > len(SUFFIX):
            name, path = entry.name[: -len(SUFFIX)], entry
        elif entry.is_dir() and (entry / NODE_TRACE).exists():
            name, path = entry.name, entry / NODE_TRACE
        else:
            continue  # numbered segments (read with their live file), notes, anything else
        if name in found:
            raise ClusterTraceError(
                f"{directory}: two traces claim node {name!r}: {found[name].relative_to(directory)} and "
                f"{path.relative_to(directory)} (keep one)"
            )
        found[name] = path
    if not found:
        raise ClusterTraceError(
            f"{directory}: no node traces in it (a cluster trace holds NODE{SUFFIX} files or NODE/{NODE_TRACE} folders)"
        )
    return found


def _identity(trace: Trace) -> tuple[Any, ...] | None:
    """Which runtime run wrote the trace: its host, pid and start time."""
    started = next((e for e in trace.events if e.get("type") == "runtime_started"), None)
    if started is None:
        return None
    return (trace.header.get("node"), started.get("pid"), started.get("t"))


def read_cluster_trace(directory: Path) -> ClusterTrace:
    """Every node trace in `directory`, checked, and their merged history.

    Raises ClusterTraceError for a directory with no node traces and for two
    traces of the same node (one name twice, or one runtime's run under two
    names: it would count twice); TraceError (naming the file and line) for
    a node trace that does not read."""
    paths = node_traces(directory)
    nodes: dict[str, Trace] = {}
    runs: dict[tuple[Any, ...], str] = {}
    for name, path in paths.items():
        trace = read_trace(path)
        identity = _identity(trace)
        if identity is not None and identity in runs:
            other = runs[identity]
            raise ClusterTraceError(
                f"{directory}: two traces claim the same node: {paths[other].relative_to(directory)} and "
                f"{path.relative_to(directory)} are one runtime's run (host {identity[0]}, pid {identity[1]}); keep one"
            )
        if identity is not None:
            runs[identity] = name
        for event in trace.events:
            event["node"] = name  # runtime_started's own `node` (the host) gives way to the cluster's name
        nodes[name] = trace
    return ClusterTrace(
        directory, nodes, list(merged(nodes)), paths, {n: str(t.header.get("node", "")) for n, t in nodes.items()}
    )


def merged(nodes: dict[str, Trace]) -> Iterator[dict[str, Any]]:
    """The nodes' events by time, each node's in its own order."""
    streams = [[(e.get("t", 0.0), rank, e) for e in trace.events] for rank, trace in enumerate(nodes.values())]
    for _, _, event in heapq.merge(*streams, key=lambda item: (item[0], item[1])):
        yield event


def summarize_cluster(cluster: ClusterTrace) -> dict[str, Any]:
    """What `krex trace DIR` prints: the cluster's span and totals, then each node's summary."""
    per_node = {
        name: summarize(trace) | {"node": name, "host": cluster.hosts.get(name, "")} for name, trace in cluster.nodes.items()
    }
    totals: dict[str, int] = {}
    for summary in per_node.values():
        for key, value in summary["totals"].items():
            totals[key] = totals.get(key, 0) + value
    times = [e.get("t", 0.0) for e in cluster.events]
    return {
        "cluster": True,
        "directory": str(cluster.directory),
        "nodes": per_node,
        "events": len(cluster.events),
        "span_s": (max(times) - min(times)) if times else 0.0,
        "gpus": sum(s["gpus"] for s in per_node.values()),
        "totals": totals,
    }
