"""The simulator's generated entry points: aliases, unsupported stubs and the
cuGetProcAddress table (native/tools/gen_simcuda_entry_points.py, run by the
build from native/src/simcuda/simcuda_entry_points.txt)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from krex_native import NATIVE

CUDA_INCLUDE = os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include")
GENERATOR = NATIVE / "tools" / "gen_simcuda_entry_points.py"
SOURCES = sorted(str(p) for p in (NATIVE / "src" / "simcuda").glob("*.c"))
needs_cuda_h = pytest.mark.skipif(not Path(CUDA_INCLUDE, "cuda.h").exists(), reason="no cuda.h")


def build_sim() -> Path:
    proc = subprocess.run(["make", "-s", "-C", str(NATIVE), "sim"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return NATIVE / "build" / "sim"


def generate(tmp_path: Path, listing: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "list.txt").write_text(listing)
    return subprocess.run(
        [sys.executable, str(GENERATOR), "--cuda-include", CUDA_INCLUDE, "--list", str(tmp_path / "list.txt"),
         "--table", str(tmp_path / "table.inc"), *SOURCES],
        capture_output=True, text=True,
    )


def test_every_export_is_in_the_proc_address_table() -> None:
    sim = build_sim()
    out = subprocess.run(["nm", "-D", "--defined-only", str(sim / "libcuda.so.1")],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[1] in "TtWw"}
    # The simulator's own calls (krex_sim_*: forwarded mode's server names the
    # command it serves) are not driver entry points: no resolver hands them out.
    exported = {name for name in exported if not name.startswith("krex_sim_")}
    table = (sim / "gen" / "simcuda_procaddr_table.inc").read_text()
    rows = set(re.findall(r"^ROW(?:_PT)?\(\w+, \d+, (\w+)(?:, \w+, (\w+))?\),$", table, re.MULTILINE))
    in_table = {name for row in rows for name in row if name}
    assert exported == in_table, (sorted(exported - in_table), sorted(in_table - exported))


@needs_cuda_h
def test_generator_refuses_an_alias_with_other_parameters(tmp_path: Path) -> None:
    proc = generate(tmp_path, "alias cuStreamGetCtx _v2_ptsz\n")  # _v2 takes a green context too
    assert proc.returncode != 0 and "parameters differ" in proc.stderr, proc.stderr


@needs_cuda_h
def test_generator_refuses_names_cuda_h_lacks_and_names_written_twice(tmp_path: Path) -> None:
    proc = generate(tmp_path, "unsupported cuNoSuchEntryPoint\n")
    assert proc.returncode != 0 and "not declared in cuda.h" in proc.stderr, proc.stderr
    proc = generate(tmp_path, "unsupported cuInit\n")  # written by hand
    assert proc.returncode != 0 and "exported twice" in proc.stderr, proc.stderr
