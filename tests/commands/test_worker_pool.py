"""The worker-pool base every mode's pool stands on (commands/workers/worker_pool.py),
with a pool whose workers are no processes: a retired worker is replaced (and
no longer after shutdown), the pool knows the processes it started, a failed
start is retried after a pause that grows, and the one `ready` callback is
told of each worker that becomes ready."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krex_runtime.commands.workers.worker_pool import RETRY_BASE_S, RETRY_MAX_S, WorkerPool, retry_delay
from krex_runtime.node.gpus import Gpu


class NoWriter:
    def close(self) -> None:
        pass


@dataclass
class FakeWorker:
    id: str
    gpu: int
    pid: int
    exited: asyncio.Task[int]
    writer: Any = field(default_factory=NoWriter)
    cgroup: Path | None = None
    state: str = "warming"


class FakePool(WorkerPool[FakeWorker]):
    """Workers that are ready at once; every retirement is written down."""

    def __init__(self, gpus: list[Gpu], log_dir: Path, ready: Any) -> None:
        super().__init__("fake", "fake worker", gpus, log_dir, ready, logging.getLogger("test.pool"))
        self.retired: list[tuple[str, str, bool]] = []
        self.pids = iter(range(1_000_000, 2_000_000))

    def per_gpu(self) -> int:
        return 2

    async def _spawn_worker(self, gpu: int) -> FakeWorker | None:
        worker = FakeWorker(self._new_id(gpu), gpu, next(self.pids), asyncio.create_task(asyncio.sleep(0, 0)))
        self.workers[worker.id] = worker
        return worker

    async def _see_ready(self, worker: FakeWorker) -> None:
        worker.state = "idle"
        self._ready()

    def _announce_retired(self, worker: FakeWorker, cause: str, reason: str, replaced: bool) -> None:
        self.retired.append((worker.id, reason, replaced))

    def _kill(self, worker: FakeWorker) -> None:
        pass  # no process behind it

    def command_of(self, pid: int, command_id: str) -> str | None:
        return "" if self.started(pid, command_id) else None


def gpus(count: int) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-{i}", name="sim", memory_total=0, cpus=(), simulated=True) for i in range(count)]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_pool_keeps_its_workers_and_replaces_a_retired_one(tmp_path: Path) -> None:
    told: list[int] = []

    async def scenario() -> FakePool:
        pool = FakePool(gpus(2), tmp_path, lambda: told.append(1))
        pool.start()
        await settle()
        assert len(pool.workers) == 4 and len(told) == 4  # two per GPU, each ready told once
        first = next(iter(pool.workers.values()))
        pool._retire(first, "worn out")
        await settle()
        assert first.id not in pool.workers and len(pool.workers) == 4 and len(told) == 5
        assert pool.retired == [(first.id, "worn out", True)]
        await pool.shutdown()
        return pool

    pool = asyncio.run(scenario())
    assert not pool.workers
    assert [replaced for _, _, replaced in pool.retired[1:]] == [False] * 4  # none replaced after shutdown


def test_a_pool_knows_the_processes_it_started(tmp_path: Path) -> None:
    async def scenario() -> None:
        pool = FakePool(gpus(1), tmp_path, lambda: None)
        pool.start()
        await settle()
        worker = next(iter(pool.workers.values()))
        assert pool.started(worker.pid, "")  # by its pid
        assert pool.started(12345, worker.id)  # by the id its environment names (a child keeps it)
        assert not pool.started(12345, "a1b2-7")  # a command's
        assert pool.command_of(12345, "a1b2-7") is None
        await pool.shutdown()

    asyncio.run(scenario())


def test_failed_starts_are_retried_after_pauses_that_grow_to_a_bound() -> None:
    delays = [retry_delay(n) for n in range(12)]
    assert delays[0] == delays[1] == RETRY_BASE_S
    assert all(later >= earlier for earlier, later in itertools.pairwise(delays))
    assert delays[3] == 4 * RETRY_BASE_S and delays[-1] == RETRY_MAX_S
