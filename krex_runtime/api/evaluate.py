"""Evaluating candidate kernels (docs/evaluation.md, "Evaluating from
Python"): `AsyncClient.evaluate` and `evaluate_many`, and the blocking
Client's, are these functions.

Each evaluation is one command, the harness run on a problem file and a
candidate file (`python -m krex_runtime.eval.harness --problem P --candidate
C ...`), labelled `eval:<batch>/<problem>/<candidate>`; its Result becomes an
Evaluation (krex_runtime/wire/evaluation.py), the times taken from below.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from krex_runtime.api.options import Command, takes_options
from krex_runtime.api.results import Result
from krex_runtime.wire.evaluation import FLAG_SPEEDUP, Evaluation, EvaluationError, Pair, evaluation_of

HARNESS_MODULE = "krex_runtime.eval.harness"
PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class EvalOptions:
    """What the harness is asked (its options, docs/evaluation.md); a results
    file keys its rows by these and the files' sha256."""

    inputs: int = 5
    atol: float = 1e-2
    rtol: float = 1e-2
    dtype: str = "float32"
    trials: int = 100
    warmup: int = 10
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("inputs", "trials"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.warmup < 0 or self.atol < 0 or self.rtol < 0:
            raise ValueError("warmup, atol and rtol must not be negative")

    def argv(self) -> list[str]:
        return [word for f in dataclasses.fields(self)
                for word in (f"--{f.name}", str(getattr(self, f.name)))]

    def key(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Maps(Protocol):
    """The client an evaluation runs on (AsyncClient): its `map`."""

    def map(self, commands: Iterable[Command | Sequence[str]], *, max_in_flight: int = 8,
            **common: Any) -> AsyncIterator[Result]: ...


def sha256_of(path: PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def pair_of(problem: PathLike, candidate: PathLike) -> Pair:
    """The two files, absolute, with their sha256; FileNotFoundError naming the one missing."""
    paths = [Path(problem).absolute(), Path(candidate).absolute()]
    for what, path in zip(("problem", "candidate"), paths):
        if not path.is_file():
            raise FileNotFoundError(f"no {what} file {path}")
    return Pair(str(paths[0]), str(paths[1]), sha256_of(paths[0]), sha256_of(paths[1]))


def label_of(batch: str, pair: Pair) -> str:
    return f"eval:{batch}/{Path(pair.problem).stem}/{Path(pair.candidate).stem}"


def harness_argv(pair: Pair, options: EvalOptions, python: str, harness: Sequence[str] | None = None) -> list[str]:
    """The command of one evaluation. `harness`: the argv that runs the harness
    in place of `python -m krex_runtime.eval.harness` (one of your own)."""
    runs = list(harness) if harness else [python, "-m", HARNESS_MODULE]
    return runs + ["--problem", pair.problem, "--candidate", pair.candidate] + options.argv()


@takes_options
async def evaluate(
    client: _Maps, problem: PathLike, candidate: PathLike, *, inputs: int = 5, atol: float = 1e-2,
    rtol: float = 1e-2, dtype: str = "float32", trials: int = 100, warmup: int = 10, seed: int = 42,
    flag_speedup: float = FLAG_SPEEDUP, python: str = sys.executable, harness: Sequence[str] | None = None,
    batch: str | None = None, **submit: Any,
) -> Evaluation:
    """Evaluate one candidate against its problem: one command, its Evaluation.
    The submit options (`timeout`, `gpu`, `mode`, ...) are `run`'s; `batch`
    names the label's batch (default: the candidate's folder name).
    EvaluationError when the harness printed a malformed result line;
    cancelling the call cancels the command."""
    options = EvalOptions(inputs, atol, rtol, dtype, trials, warmup, seed)
    pair = pair_of(problem, candidate)
    runs = _run(client, [pair], options, flag_speedup, python, harness, batch, 1, submit, True)
    try:
        async for evaluation in runs:
            return evaluation
    finally:
        await runs.aclose()  # type: ignore[attr-defined]  # an async generator: cancelled, it cancels the command
    raise RuntimeError("the evaluation's command gave no result")  # map yields one per command


@takes_options
async def evaluate_many(
    client: _Maps, pairs: Iterable[tuple[PathLike, PathLike]], *, max_in_flight: int = 8, inputs: int = 5,
    atol: float = 1e-2, rtol: float = 1e-2, dtype: str = "float32", trials: int = 100, warmup: int = 10,
    seed: int = 42, flag_speedup: float = FLAG_SPEEDUP, python: str = sys.executable,
    harness: Sequence[str] | None = None, batch: str | None = None, **submit: Any,
) -> AsyncIterator[Evaluation]:
    """Evaluate (problem, candidate) pairs, `max_in_flight` commands at a time
    (`map`), yielding each Evaluation as its command ends (match them by
    `problem_path` and `candidate_path`). A malformed result line does not
    end the batch: its evaluation is a `runtime_error` saying so. Leaving
    the loop early cancels the commands in flight."""
    options = EvalOptions(inputs, atol, rtol, dtype, trials, warmup, seed)
    found = [pair_of(p, c) for p, c in pairs]  # every file, before any command
    async for evaluation in _run(client, found, options, flag_speedup, python, harness, batch, max_in_flight,
                                 submit, False):
        yield evaluation


async def _run(client: _Maps, pairs: Sequence[Pair], options: EvalOptions, flag_speedup: float, python: str,
               harness: Sequence[str] | None, batch: str | None, max_in_flight: int, submit: dict[str, Any],
               strict: bool) -> AsyncIterator[Evaluation]:
    if "label" in submit or "argv" in submit:
        raise TypeError("an evaluation's label and command are its own (batch= names the batch)")
    by_label: dict[str, Pair] = {}
    commands = []
    for pair in pairs:
        label = label_of(batch if batch is not None else Path(pair.candidate).parent.name, pair)
        if label in by_label:  # the same names twice: told apart by the label, the one thing map gives back
            label = f"{label}#{sum(1 for k in by_label if k.split('#')[0] == label) + 1}"
        by_label[label] = pair
        commands.append(Command(harness_argv(pair, options, python, harness), label=label))
    iterator = client.map(commands, max_in_flight=max_in_flight, **submit)
    try:
        async for result in iterator:
            yield _evaluation(result, by_label[result.label], flag_speedup, strict)
    finally:
        await iterator.aclose()  # type: ignore[attr-defined]  # an async generator: its cancels run now


def _evaluation(result: Result, pair: Pair, flag_speedup: float, strict: bool) -> Evaluation:
    try:
        return evaluation_of(result.record, result.stdout, flag_speedup, stderr=result.stderr, pair=pair)
    except EvaluationError as exc:
        if strict:
            raise EvaluationError(f"{result.id} ({result.label}): {exc}") from None
        record = {k: v for k, v in result.record.items() if k != "evaluation"}
        made = evaluation_of(record, "", flag_speedup, stderr=result.stderr, pair=pair)
        return dataclasses.replace(made, failure_class="runtime_error", failure_message=str(exc))
