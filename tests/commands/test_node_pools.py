"""The node's pools asked together (commands/pools.py), without starting any
worker: what each mode is refused for, the one event that signals readiness,
and which command a process acts for."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from krex_runtime.commands.pools import NodePools
from krex_runtime.node.config import Config
from krex_runtime.node.gpus import Gpu


class NoSink:
    def emit(self, event: Any) -> None:
        pass


def forked_only() -> Config:
    config = Config()
    return replace(config, pool=replace(config.pool, zygote=True, size_per_gpu=0))


def node_pools(config: Config, tmp_path: Path) -> NodePools:
    gpus = [Gpu(index=0, uuid="GPU-0", name="sim", memory_total=0, cpus=(), simulated=True)]
    return NodePools(config, gpus, NoSink(), None, tmp_path)  # no tenant setup: no worker is started


def test_a_mode_without_its_pool_is_refused_with_what_to_configure(tmp_path: Path) -> None:
    pools = node_pools(forked_only(), tmp_path)
    assert pools.pooled is None and pools.forwarded is None and pools.forked is not None
    assert "pool.size_per_gpu >= 1" in pools.refusal("pooled", None)
    assert "forward.servers_per_gpu >= 1" in pools.refusal("forwarded", 0)
    assert pools.refusal("forked", 0) == "" and pools.refusal("process", None) == ""
    pools.forked.refusal[0] = "torch started a thread"  # its zygote refused to serve
    assert pools.refusal("forked", 0) == "forked mode is unavailable: torch started a thread"
    assert pools.has_ready("process", 0) and not pools.has_ready("forked", 0) and not pools.has_ready("pooled", 0)


def test_every_pool_signals_readiness_by_the_one_event(tmp_path: Path) -> None:
    config = forked_only()
    pools = node_pools(replace(config, pool=replace(config.pool, size_per_gpu=1)), tmp_path)
    assert pools.pooled is not None and pools.forked is not None
    for pool in (pools.pooled, pools.forked):  # forwarded mode's the same base class, WorkerPool
        assert not pools.ready.is_set()
        pool._ready()
        assert pools.ready.is_set()
        pools.ready.clear()


def test_a_process_no_pool_started_acts_for_the_command_it_names(tmp_path: Path) -> None:
    pools = node_pools(forked_only(), tmp_path)
    assert pools.command_of(4321, "a1b2-7") == "a1b2-7"
    assert not pools.started(4321, "a1b2-7") and not pools.acts_for_commands(4321)
    assert pools.forked is not None
    zygote_id = pools.forked._new_id(0)  # what a forked child's environment names
    assert pools.started(4321, zygote_id)
    assert pools.command_of(4321, zygote_id) == ""  # no forked command's tree holds it


def test_with_native_default_a_command_that_is_no_python_entry_point_runs_forwarded(tmp_path: Path) -> None:
    config = Config()
    config = replace(config, forward=replace(config.forward, servers_per_gpu=1, native_default=True))
    gpus = [Gpu(index=0, uuid="GPU-0", name="sim", memory_total=0, cpus=(), simulated=True)]
    setup: Any = SimpleNamespace(env=SimpleNamespace(run_dir=tmp_path))  # enough to name the segments; none starts
    pools = NodePools(config, gpus, NoSink(), setup, tmp_path)
    assert pools.default_mode(["./gemm_benchmark", "--n", "4096"]) == "forwarded"
    assert pools.default_mode([sys.executable, "candidate.py"]) == config.dispatcher.default_mode
    assert node_pools(Config(), tmp_path).default_mode(["./gemm_benchmark"]) == Config().dispatcher.default_mode
