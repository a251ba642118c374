"""The node's pools asked together (commands/pools.py), without starting any
worker: what each mode is refused for, the one listener told of readiness,
and which command a process acts for."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
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


def test_the_one_listener_hears_every_pool(tmp_path: Path) -> None:
    pools = node_pools(forked_only(), tmp_path)
    heard: list[str] = []
    assert pools.forked is not None
    pools.forked._ready()  # before the node sets its listener: nobody to tell
    pools.when_ready(lambda: heard.append("ready"))
    pools.forked._ready()
    assert heard == ["ready"]


def test_a_process_no_pool_started_acts_for_the_command_it_names(tmp_path: Path) -> None:
    pools = node_pools(forked_only(), tmp_path)
    assert pools.command_of(4321, "a1b2-7") == "a1b2-7"
    assert not pools.started(4321, "a1b2-7") and not pools.acts_for_commands(4321)
    assert pools.forked is not None
    zygote_id = pools.forked._new_id(0)  # what a forked child's environment names
    assert pools.started(4321, zygote_id)
    assert pools.command_of(4321, zygote_id) == ""  # no forked command's tree holds it
