"""The cluster trace: one krex trace per node in a directory, read as one
history by time, each event tagged with its node (docs/trace-format.md,
"Cluster traces").

Standard library and krex_runtime only, no Ray: what a cluster recorded can
be read, summarised (`krex trace DIR`) and replayed (`krex-console --replay
DIR`) on a machine without the cluster layer. The reader itself lives in
krex_runtime.wire.trace.cluster, where the CLI and the console may import
it; this module adds `collect`, which builds such a directory from the
nodes' run dirs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from krex_runtime.wire.trace.cluster import (
    NODE_TRACE,
    SUFFIX,
    ClusterTrace,
    ClusterTraceError,
    merged,
    node_traces,
    read_cluster_trace,
    summarize_cluster,
)
from krex_runtime.wire.trace.segments import segments

__all__ = [
    "NODE_TRACE",
    "SUFFIX",
    "ClusterTrace",
    "ClusterTraceError",
    "collect",
    "merged",
    "node_traces",
    "read_cluster_trace",
    "summarize_cluster",
]


def collect(traces: dict[str, Path], directory: Path, link: bool = False) -> Path:
    """Make `directory` a cluster trace of the given node traces (node name ->
    the live file of its trace, `<run_dir>/trace.jsonl` by default): each
    becomes `<name>.jsonl`, its numbered segments `<name>.jsonl.N` beside it.
    Copies (or hard-links, with `link`, where the file system allows), never
    moves: the runtimes may still be writing. A name that is not a plain file
    name is refused, as is a name already in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, live in traces.items():
        if not name or name != os.path.basename(name) or name.startswith("."):
            raise ClusterTraceError(f"node name {name!r} cannot name a file in a cluster trace")
        target = directory / f"{name}{SUFFIX}"
        if target.exists() or (directory / name).exists():
            raise ClusterTraceError(f"{directory}: already holds a trace of node {name!r}")
        for segment in segments(live):
            suffix = segment.name[len(live.name):]  # "" for the live file, ".N" for a numbered segment
            copy = directory / f"{target.name}{suffix}"
            if link:
                try:
                    os.link(segment, copy)
                    continue
                except OSError:
                    pass  # another file system: copy instead
            shutil.copyfile(segment, copy)
    return directory
