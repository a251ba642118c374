"""The corpus (docs/modes.md, "The corpus") forwarded on a real GPU, with the
default configuration. Skipped without a GPU (marker `gpu`) or without the
CUDA toolkit (nvcc, cuBLAS).

    make -C native all corpus-gpu && python3 -m pytest tests/gpu/test_gpu_forward_corpus.py -s

- The GPU-only entries (native/tests/corpus/gpu/, `make -C native
  corpus-gpu`): a cuBLAS SGEMM benchmark and an nvbench-style harness, built
  with `nvcc -cudart shared`. Whether cuBLAS's calls can be forwarded is what
  this run finds out (it carries a CUDA runtime of its own, which may ask the
  driver for its private tables), so only what forwarded mode promises is
  asserted: the command is not lost (it finishes, exit 0, its results
  checked), forwarded or run again in process mode with the reason and
  stderr saying so.
- The simulator corpus where it makes sense against the real driver: the
  programs that load no module (the others load the simulator's stand-in
  for a module, which a real driver refuses, and runtime_benchmark registers
  the simulator's stand-in for a fatbinary), built with the host compiler
  against the toolkit's cuda.h and libcuda, each with the outcome
  test_forward_corpus asserts on the simulator.

Each program prints one line to stdout, `name | outcome | reason`, for the
outcome rows of docs/modes.md's table.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from runtime_helpers import REPO, module_runtime, regions_config

from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import Runtime, wait_until

pytestmark = pytest.mark.gpu

GPU_SOURCES = REPO / "native" / "tests" / "corpus" / "gpu"
# Each GPU-only entry and what its stdout says once its results were checked.
GPU_ONLY = {"cublas_gemm": ["checked"], "nvbench_style": ["saxpy", "reduce_sum"]}
# Simulator corpus programs that run on the real driver, with their outcome
# there: forwarded, or run again in process mode at the call named.
ON_THE_DRIVER = {"device_query": None, "static_runtime": "cuGetExportTable"}
FELL_BACK = "ran again in process mode"


def toolkit() -> tuple[Path, Path]:
    """nvcc and the toolkit's folder (the one above nvcc's, else
    /usr/local/cuda: nvcc may be a wrapper elsewhere), or skip."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc: the GPU corpus needs the CUDA toolkit")
    for cuda in (Path(nvcc).resolve().parent.parent, Path("/usr/local/cuda")):
        if (cuda / "include" / "cuda.h").exists():
            return Path(nvcc), cuda
    pytest.skip(f"no cuda.h beside {nvcc} or in /usr/local/cuda")


@pytest.fixture(scope="module")
def programs(native_built: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    nvcc, cuda = toolkit()
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "corpus-gpu", f"NVCC={nvcc}",
                    f"CORPUS_GPU_CUDA={cuda}"], check=True)
    built = {name: native_build.native_dir() / "tests" / "corpus-gpu" / name for name in GPU_ONLY}
    out = tmp_path_factory.mktemp("corpus-driver")
    corpus = REPO / "native" / "tests" / "corpus"
    for name in ON_THE_DRIVER:
        built[name] = out / name
        subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", f"-I{cuda / 'include'}", "-o", str(built[name]),
                        str(corpus / f"{name}.c"), f"-L{cuda / 'lib64' / 'stubs'}", "-lcuda"], check=True)
    return built


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, programs: dict[str, Path]) -> Iterator[Runtime]:
    # The default [forward] settings but the server count (fallback is not
    # named: process mode) and the time a server has to clean up on a GPU.
    forward = "\n[forward]\nservers_per_gpu = 1\nclean_timeout_s = 30\n"
    for runtime in module_runtime(tmp_path_factory.mktemp("corpus") / "rt", sim=0, visible=(0,), policy="krex",
                                  slots=4, extra_config=regions_config() + forward):
        server_ready(runtime)
        yield runtime


def server_ready(runtime: Runtime) -> None:
    assert runtime.proc is not None
    pid = runtime.proc.pid
    wait_until(lambda: any(p.name() == "krex-ctxd" for p in psutil.Process(pid).children()), 120,
               "the context server to be ready")


def run(rt: Runtime, program: Path) -> dict[str, Any]:
    done = rt.krex("run", "--mode", "forwarded", "--json", "--timeout", "300", "--", str(program), timeout=400)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def outcome(result: dict[str, Any]) -> str:
    reason = result.get("reason") or ""
    if reason.startswith(FELL_BACK):
        return FELL_BACK
    if "after it had held a region" in reason:
        return "refused"
    return "forwarded" if result["state"] == "finished" else f"{result['state']} (exit {result.get('exit_code')})"


def record(name: str, result: dict[str, Any]) -> str:
    found = outcome(result)
    print(f"\n{name} | {found} | {result.get('reason') or '-'}")
    return found


def test_every_gpu_only_entry_is_run() -> None:
    assert {p.stem for p in GPU_SOURCES.glob("*.cu")} == set(GPU_ONLY)


@pytest.mark.parametrize("name", sorted(GPU_ONLY))
def test_gpu_only_entry_is_not_lost(rt: Runtime, programs: dict[str, Path], name: str) -> None:
    result = run(rt, programs[name])
    found = record(name, result)
    assert result["state"] == "finished" and result["exit_code"] == 0, result
    lines = result["stdout"].splitlines()
    assert lines and all(line.startswith(f"{name}: ") for line in lines), result
    for word in GPU_ONLY[name]:
        assert any(word in line and line.endswith("checked") for line in lines), (word, result)
    assert found in ("forwarded", FELL_BACK), result
    ran_again = "running the command again in process mode" in result["stderr"]
    assert ran_again == (found == FELL_BACK), result
    if found == FELL_BACK:
        call = result["reason"].removeprefix(f"{FELL_BACK}: it called ").split(", which forwarded mode")[0]
        assert result["reason"].startswith(f"{FELL_BACK}: it called {call}, which forwarded mode does not "
                                           f"forward"), result
        assert f"krex: {call} is not forwarded; running the command again in process mode" in result["stderr"]


@pytest.mark.parametrize("name", sorted(ON_THE_DRIVER))
def test_simulator_corpus_on_the_driver(rt: Runtime, programs: dict[str, Path], name: str) -> None:
    result = run(rt, programs[name])
    record(name, result)
    assert result["state"] == "finished", result
    assert result["stdout"].startswith(f"{name}: "), result
    call = ON_THE_DRIVER[name]
    if call is None:
        assert "krex forward" not in result["stderr"] and "process mode" not in result["reason"], result
    else:
        assert result["reason"].startswith(f"{FELL_BACK}: it called {call}, which forwarded mode does not "
                                           f"forward"), result
        assert f"krex: {call} is not forwarded; running the command again in process mode" in result["stderr"]
