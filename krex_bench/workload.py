"""The workload: benchmark problems, each with candidate implementations.

A command benchmarks one candidate the way a kernel agent does: start Python,
import torch and triton, build the candidate (compiling its Triton kernel),
check it against a reference, then time it inside `region()` and print one
JSON line (krex_bench/candidate.py). Kernel durations on an H200 span the report's
buckets: fp32 matmul > 10 ms, bf16 and smaller fp32 matmuls 1-10 ms (the
fp32 ones run below the power cap, so the bucket has clock-matched
candidates), softmax 0.1-1 ms, RMSNorm
and GELU < 0.1 ms, and the unfused torch variants one bucket up. Every
candidate carries its native median on the H200 (`native_ms`): the mean of
the native and native-repeat runs of run 8 (docs/bench/h200-run8-results.json,
every candidate measured, four placements each) or, where `estimated` (a
candidate added since), what its problem's measured candidates make likely; the
report's p95 needs at least 8 candidates per bucket, and
tests/bench/test_bench.py checks from these times that the whole workload has them.
docs/BENCHMARKS.md lists them (`krex bench list --markdown`).

This module is data only (no torch): the runner and the report read it on
machines without a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Candidate:
    problem: str
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    native_ms: float | None = None  # native median on the H200
    estimated: bool = False  # native_ms is an estimate: no H200 run has measured this candidate yet

    @property
    def key(self) -> str:
        return f"{self.problem}/{self.name}"


@dataclass(frozen=True)
class Problem:
    name: str
    summary: str
    # Timed repeats per command: about 0.3-0.5 s of timing on an H200, near a
    # tenth of a command, as in agents' benchmark commands.
    repeats: int
    candidates: tuple[Candidate, ...]


def _candidates(problem: str, table: list[tuple[str, dict[str, Any], float | str]]) -> tuple[Candidate, ...]:
    """Rows of (name, params, native ms): a number as measured, "~N" an estimate."""
    return tuple(
        Candidate(problem, name, params, float(str(ms).lstrip("~")), str(ms).startswith("~"))
        for name, params, ms in table
    )


def _problem(name: str, summary: str, repeats: int, table: list[tuple[str, dict[str, Any], float | str]]) -> Problem:
    """A problem whose candidates are rows of (name, params, native ms), as _candidates takes them."""
    return Problem(name, summary, repeats, _candidates(name, table))


def _tiles(m: int, n: int, k: int, warps: int, stages: int, group: int = 8) -> dict[str, Any]:
    return {"impl": "triton", "block_m": m, "block_n": n, "block_k": k, "warps": warps, "stages": stages, "group_m": group}


# The fp32 problems' Triton tilings (after torch's own), one set for both sizes.
FP32_TILES = (
    ("t128x128x32w8s3", _tiles(128, 128, 32, 8, 3)),
    ("t128x64x32w4s4", _tiles(128, 64, 32, 4, 4)),
    ("t64x128x32w4s4", _tiles(64, 128, 32, 4, 4)),
    ("t64x64x32w4s3", _tiles(64, 64, 32, 4, 3)),
    ("t128x128x16w8s2", _tiles(128, 128, 16, 8, 2)),
    ("t64x64x64w4s2", _tiles(64, 64, 64, 4, 2)),
    ("t128x128x32w8s3g1", _tiles(128, 128, 32, 8, 3, group=1)),
)


def _fp32_candidates(problem: str, native_ms: list[float | str]) -> tuple[Candidate, ...]:
    """torch, then FP32_TILES, with their native times in that order."""
    names = [("torch", {"impl": "torch"}), *FP32_TILES]
    if len(native_ms) != len(names):
        raise ValueError(f"{problem}: {len(native_ms)} native times for {len(names)} candidates")
    return _candidates(problem, [(name, params, ms) for (name, params), ms in zip(names, native_ms, strict=True)])


PROBLEMS: tuple[Problem, ...] = (
    Problem("matmul_fp32", "C = A @ B, 8192^3 float32 in IEEE precision (no tensor-core shortcuts)", 16,
            _fp32_candidates("matmul_fp32", [21.44, 25.08, 23.38, 23.55, 24.32, 33.62, 23.41, 25.09])),
    Problem("matmul_fp32_4k", "C = A @ B, 4096^3 float32 in IEEE precision: 1-10 ms kernels below the power cap", 120,
            _fp32_candidates("matmul_fp32_4k", [2.676, 3.17, 3.042, 3.065, 3.135, 4.221, 3.031, 3.169])),
    _problem("matmul_bf16", "C = A @ B, 8192^3 bfloat16 with float32 accumulation", 120, [
        ("torch", {"impl": "torch"}, 1.598),
        ("t128x256x64w8s3", _tiles(128, 256, 64, 8, 3), 1.623),
        ("t128x128x64w8s4", _tiles(128, 128, 64, 8, 4), 1.75),
        ("t128x128x32w4s4", _tiles(128, 128, 32, 4, 4), 1.828),
        ("t64x128x64w4s4", _tiles(64, 128, 64, 4, 4), 2.461),
        ("t64x64x64w4s3", _tiles(64, 64, 64, 4, 3), 3.326),
        ("t32x64x32w4s2", _tiles(32, 64, 32, 4, 2), 6.324),
        ("t128x128x64w8s4g1", _tiles(128, 128, 64, 8, 4, group=1), 1.894),
    ]),
    _problem("softmax", "row softmax of a 16384 x 8192 float32 matrix", 800, [
        ("torch", {"impl": "torch"}, 0.5496),
        ("torch_unfused", {"impl": "torch_unfused"}, 1.359),
        ("row_w4", {"impl": "triton_row", "warps": 4}, 0.2641),
        ("row_w8", {"impl": "triton_row", "warps": 8}, 0.2634),
        ("row_w16", {"impl": "triton_row", "warps": 16}, 0.2613),
        ("online_b1024w4", {"impl": "triton_online", "block": 1024, "warps": 4}, 0.3858),
        ("online_b2048w8", {"impl": "triton_online", "block": 2048, "warps": 8}, 0.3618),
        ("online_b4096w8", {"impl": "triton_online", "block": 4096, "warps": 8}, 0.2772),
    ]),
    _problem("rmsnorm", "RMSNorm over rows of a 4096 x 4096 bfloat16 matrix, with a weight", 3000, [
        ("torch_eager", {"impl": "torch_eager"}, 0.2494),
        ("torch_fn", {"impl": "torch_fn"}, 0.02718),
        ("row_w1", {"impl": "triton_row", "warps": 1}, 0.02325),
        ("row_w2", {"impl": "triton_row", "warps": 2}, 0.02242),
        ("row_w4", {"impl": "triton_row", "warps": 4}, 0.02211),
        ("rows4_w8", {"impl": "triton_rows", "rows": 4, "warps": 8}, 0.02312),
    ]),
    _problem("gelu", "GELU (tanh form) of 8M float32 values", 3000, [
        ("torch", {"impl": "torch"}, 0.02122),
        ("torch_unfused", {"impl": "torch_unfused"}, 0.1634),
        ("b256w2", {"impl": "triton", "block": 256, "warps": 2}, 0.02442),
        ("b512w4", {"impl": "triton", "block": 512, "warps": 4}, 0.02123),
        ("b4096w8", {"impl": "triton", "block": 4096, "warps": 8}, 0.02125),
    ]),
)

BY_NAME = {p.name: p for p in PROBLEMS}


def candidate(problem: str, name: str) -> Candidate:
    try:
        found = BY_NAME[problem]
    except KeyError:
        raise KeyError(f"unknown problem {problem!r}; problems: {', '.join(BY_NAME)}") from None
    for c in found.candidates:
        if c.name == name:
            return c
    raise KeyError(f"problem {problem!r} has no candidate {name!r}; candidates: {', '.join(c.name for c in found.candidates)}")


def select(scale: float, problems: list[str] | None = None) -> list[Candidate]:
    """The workload at `scale`: every chosen problem keeps ceil(scale * its
    candidates) of them (at least 2, so rankings exist), taken in catalogue
    order so two runs at one scale benchmark the same candidates."""
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    chosen = [BY_NAME[p] for p in problems] if problems else list(PROBLEMS)
    picked: list[Candidate] = []
    for problem in chosen:
        keep = max(2, math.ceil(scale * len(problem.candidates)))
        picked.extend(problem.candidates[:keep])
    return picked
