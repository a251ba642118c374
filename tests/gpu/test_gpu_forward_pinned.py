"""Forwarded pinned copies on a real GPU (docs/modes.md, "Copies from
page-locked memory"): tests/gpu/forward_pinned_copy.c times host-to-device
copies of a cuMemAllocHost buffer and of a cuMemHostRegister'ed one, in
process mode and forwarded. Skipped without a GPU (marker `gpu`).

    make -C native all && python -m pytest -m gpu tests/gpu/test_gpu_forward_pinned.py -q -s

What is asserted is what the copies are, not how long they take: both modes
finish with the data intact; forwarded, the allocation's copies are the ones
asked for (not staged) and the registered buffer's are staged and flagged.
The medians are printed side by side (benchmarks/forward_pinned.py makes the
table with more commands).
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
from runtime_helpers import REPO, regions_config

from krex_runtime.testing.local_runtime import Runtime, wait_until

pytestmark = pytest.mark.gpu

MIB, COPIES = 64, 20
STAGED_NOTE = "(a staged copy, not the copy asked for)"


def build(out: Path) -> Path:
    """forward_pinned_copy.c by the host compiler against the toolkit's cuda.h and libcuda."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cuda = Path(nvcc).resolve().parent.parent
    program = out / "forward_pinned_copy"
    subprocess.run(["cc", "-O2", f"-I{cuda / 'include'}", "-o", str(program),
                    str(REPO / "tests" / "gpu" / "forward_pinned_copy.c"), f"-L{cuda / 'lib64' / 'stubs'}", "-lcuda"],
                   check=True)
    return program


@pytest.fixture
def rt(make_runtime: Any, native_built: Path) -> Iterator[Runtime]:
    forward = '\n[forward]\nservers_per_gpu = 1\nfallback = "fail"\nclean_timeout_s = 30\n'
    runtime = make_runtime(policy="krex", sim=0, visible=(0,), slots=2,
                           extra_config=regions_config("preload") + forward)
    assert runtime.proc is not None
    wait_until(lambda: any(p.name() == "krex-ctxd" for p in psutil.Process(runtime.proc.pid).children()), 120,
               "the context server to be ready")
    yield runtime


def medians(result: dict[str, Any]) -> dict[str, float]:
    return {line.split()[0]: float(line.split()[1]) for line in result["stdout"].splitlines() if len(line.split()) == 3}


def test_a_forwarded_pinned_copy_is_the_copy_asked_for(rt: Runtime, tmp_path: Path) -> None:
    program = build(tmp_path)
    results = {mode: json.loads(rt.krex("run", "--mode", mode, "--json", "--", str(program), str(MIB),
                                        str(COPIES)).stdout) for mode in ("process", "forwarded")}
    for mode, result in results.items():
        assert result["state"] == "finished", (mode, result)
        assert result["stdout"].endswith("intact\n"), (mode, result)
    forwarded = results["forwarded"]
    # Only the registered buffer's copies are staged (its 2 + 20 timed copies, and its copy back is not:
    # the copy back lands in an allocation).
    assert STAGED_NOTE in forwarded["reason"] and f"{COPIES + 2} copies" in forwarded["reason"], forwarded
    print(f"\n{MIB} MiB host-to-device, median of {COPIES} event-timed copies (ms):")
    for kind in ("pinned", "registered"):
        print(f"  {kind:<10} process {medians(results['process'])[kind]:8.3f}  "
              f"forwarded {medians(forwarded)[kind]:8.3f}")
