"""The harness's command line (the contract's, docs/evaluation.md). A bad
argument is refused with one line on stderr and exit status 2, before
anything is loaded: no result line is printed for a command that could not
name what to evaluate."""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from typing import NoReturn

DTYPES = ("float32", "float16", "bfloat16")
USAGE_EXIT = 2


class UsageError(Exception):
    """An argument the harness cannot run with; one line."""


@dataclass(frozen=True)
class Arguments:
    problem: str
    candidate: str
    inputs: int = 5
    atol: float = 1e-2
    rtol: float = 1e-2
    dtype: str = "float32"
    trials: int = 100
    warmup: int = 10
    seed: int = 42
    device_index: int = 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python3 -m krex_runtime.eval.harness", add_help=True)
    p.add_argument("--problem", required=True, help="the problem file (Model, get_inputs, get_init_inputs)")
    p.add_argument("--candidate", required=True, help="the candidate file (ModelNew)")
    p.add_argument("--inputs", type=int, default=5, help="seeded input sets the check compares on")
    p.add_argument("--atol", type=float, default=1e-2)
    p.add_argument("--rtol", type=float, default=1e-2)
    p.add_argument("--dtype", default="float32", help=f"the floating inputs' and models' dtype: {', '.join(DTYPES)}")
    p.add_argument("--trials", type=int, default=100, help="timed trials per model")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls per model before the trials")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device-index", type=int, default=0)
    return p


def _check(a: Arguments) -> None:
    if a.inputs < 1:
        raise UsageError(f"--inputs must be at least 1, got {a.inputs}")
    if a.trials < 1:
        raise UsageError(f"--trials must be at least 1, got {a.trials}")
    if a.warmup < 0:
        raise UsageError(f"--warmup must not be negative, got {a.warmup}")
    if a.device_index < 0:
        raise UsageError(f"--device-index must not be negative, got {a.device_index}")
    for name, value in (("--atol", a.atol), ("--rtol", a.rtol)):
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{name} must be a finite number >= 0, got {value}")
    if a.dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {a.dtype!r}")
    for name, path in (("--problem", a.problem), ("--candidate", a.candidate)):
        if not os.path.isfile(path):
            raise UsageError(f"{name} {path}: no such file")
        if not os.access(path, os.R_OK):
            raise UsageError(f"{name} {path}: not readable")


def parse(argv: list[str]) -> Arguments:
    """The arguments, checked; UsageError (one line) when they cannot run."""
    ns = _parser().parse_args(argv)
    args = Arguments(problem=ns.problem, candidate=ns.candidate, inputs=ns.inputs, atol=ns.atol, rtol=ns.rtol,
                     dtype=ns.dtype, trials=ns.trials, warmup=ns.warmup, seed=ns.seed, device_index=ns.device_index)
    _check(args)
    return args


def refuse(error: UsageError) -> int:
    """Say why in one line on stderr; the exit status of a refused command line."""
    print(f"krex eval harness: error: {error}", file=sys.stderr, flush=True)
    return USAGE_EXIT
