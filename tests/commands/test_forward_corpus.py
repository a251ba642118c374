"""The corpus of native programs (native/tests/corpus/) run in forwarded mode
with the default configuration, each with the outcome docs/modes.md lists:
forwarded, run again in process mode (the reason says why), or refused.
None is lost: every program checks its own results and each ends finished
except the one refused, which is told why."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import REPO, module_runtime, regions_config

from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime

CORPUS = native_build.native_dir() / "tests" / "corpus"

# Forwarded from start to end, with how many of its copies from or to
# page-locked memory its result flags as staged: memory the program registered
# itself, which the server cannot map. Allocated page-locked memory comes from
# the pinned arena: its copies are the ones asked for, never staged.
FORWARDED = {
    "device_query": 0, "occupancy_query": 0, "pinned_copy": 0, "host_register": 2,
    "multi_stream_copies": 0, "events_stream_wait": 0, "memset_widths": 0, "threaded_launches": 0,
    "region_timing": 0, "runtime_benchmark": 1, "graph_capture": 0,
}
# Run again in process mode, at the call named.
FELL_BACK = {
    "graph_launch": "cuGraphCreate", "host_callback": "cuLaunchHostFunc", "managed_memory": "cuMemAllocManaged",
    "mapped_memory": "cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)", "static_runtime": "cuGetExportTable",
}
# Refused: the call came after a region.
REFUSED = {"region_then_unknown": "cuMemAllocManaged"}


@pytest.fixture(scope="module")
def corpus(native_built: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "corpus-tests"], check=True)
    return CORPUS


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Iterator[Runtime]:
    # The default [forward] settings but the server count: fallback is not named.
    forward = "\n[forward]\nservers_per_gpu = 2\nclean_timeout_s = 5\n"
    yield from module_runtime(tmp_path_factory.mktemp("corpus") / "rt", sim=1, policy="krex", slots=8,
                              extra_config=regions_config() + forward)


def run(rt: Runtime, program: Path) -> dict[str, Any]:
    done = rt.krex("run", "--mode", "forwarded", "--json", "--timeout", "60", "--", str(program))
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_corpus_is_what_the_table_lists(corpus: Path) -> None:
    built = {p.name for p in corpus.iterdir() if p.is_file()}
    assert built == set(FORWARDED) | set(FELL_BACK) | set(REFUSED)
    assert len(built) >= 15


@pytest.mark.parametrize("name", sorted(FORWARDED))
def test_forwarded(rt: Runtime, corpus: Path, name: str) -> None:
    result = run(rt, corpus / name)
    assert result["state"] == "finished", result
    assert result["stdout"].startswith(f"{name}: "), result
    assert "krex forward" not in result["stderr"] and "process mode" not in result["reason"], result
    staged = FORWARDED[name]
    assert ("(a staged copy, not the copy asked for)" in result["reason"]) == (staged > 0), result
    if staged:
        assert result["reason"].startswith(f"{staged} cop{'y' if staged == 1 else 'ies'} from or to page-locked"), result


@pytest.mark.parametrize("name", sorted(FELL_BACK))
def test_fell_back_to_process_mode(rt: Runtime, corpus: Path, name: str) -> None:
    result = run(rt, corpus / name)
    assert result["state"] == "finished", result
    assert result["stdout"].startswith(f"{name}: "), result
    call = FELL_BACK[name]
    assert result["reason"].startswith(f"ran again in process mode: it called {call}, which forwarded mode does "
                                       f"not forward"), result
    assert f"krex: {call} is not forwarded; running the command again in process mode" in result["stderr"]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_after_a_region(rt: Runtime, corpus: Path, name: str) -> None:
    result = run(rt, corpus / name)
    assert result["state"] == "failed" and result["exit_code"] == 3, result
    assert f"it called {REFUSED[name]} after it had held a region" in result["reason"], result
    assert "running the command again in process mode" not in result["stderr"], result
    assert "already held a region" in result["stderr"], result
