"""`krex eval --suite DIR --candidates DIR`: which candidate goes with which
problem, and the results file a batch appends to and resumes from.

A candidate is matched to its problem by file name: `19_ReLU.py` and
`19_ReLU.v2.py` (anything after the problem's name and a dot) are
candidates of the problem `19_ReLU.py`, and so is every `.py` file in a
folder `19_ReLU/`. Files that are not `.py` are left alone; a `.py` file or
a folder that names no problem is a usage error, said before anything runs.

The results file holds one JSON object per line, an Evaluation's to_dict
with the `key` it was run under: the problem's and the candidate's names and
sha256, and the harness's options. A rerun with --resume skips the pairs
whose key is already there, so a changed candidate (another sha256) or other
options are evaluated again. Each line is written whole and flushed as its
evaluation ends: an interrupted batch leaves a file that reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krex_runtime.api.evaluate import EvalOptions, sha256_of
from krex_runtime.wire.evaluation import Evaluation, EvaluationError, evaluation_from_dict


class SuiteError(Exception):
    """A suite, candidates folder or results file that cannot be used (a usage error)."""


@dataclass(frozen=True)
class SuitePair:
    problem: Path
    candidate: Path
    name: str  # the candidate as the results file names it: relative to the candidates folder

    def key(self, options: EvalOptions) -> dict[str, Any]:
        """What a result is kept under: the same files, by content, under the same options."""
        return {"problem": self.problem.name, "candidate": self.name,
                "problem_sha256": sha256_of(self.problem), "candidate_sha256": sha256_of(self.candidate),
                "options": options.key()}


def problems_of(suite: Path) -> dict[str, Path]:
    if not suite.is_dir():
        raise SuiteError(f"--suite {suite}: no such folder")
    found = {p.stem: p for p in sorted(suite.glob("*.py")) if p.is_file() and p.name != "__init__.py"}
    if not found:
        raise SuiteError(f"--suite {suite}: no problem files (*.py) in it")
    return found


def pairs_of(suite: Path, candidates: Path) -> list[SuitePair]:
    """Every candidate with its problem, by problem then candidate name."""
    problems = problems_of(suite)
    if not candidates.is_dir():
        raise SuiteError(f"--candidates {candidates}: no such folder")
    pairs = []
    for entry in sorted(candidates.iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_dir():
            if entry.name not in problems:
                raise SuiteError(f"candidates folder {entry}: no problem {entry.name}.py in {suite}")
            pairs += [SuitePair(problems[entry.name], f, f"{entry.name}/{f.name}")
                      for f in sorted(entry.glob("*.py")) if f.is_file()]
        elif entry.suffix == ".py":
            problem = _problem_of(entry.stem, problems)
            if problem is None:
                raise SuiteError(f"candidate {entry}: no problem of its name in {suite} "
                                 f"(19_ReLU.py and 19_ReLU.v2.py are candidates of 19_ReLU.py)")
            pairs.append(SuitePair(problem, entry, entry.name))
    if not pairs:
        raise SuiteError(f"--candidates {candidates}: no candidate of any problem in {suite}")
    return sorted(pairs, key=lambda p: (p.problem.name, p.name))


def _problem_of(stem: str, problems: dict[str, Path]) -> Path | None:
    """The problem whose name the candidate's stem is, or starts with followed by a dot (the longest such)."""
    names = [name for name in problems if stem == name or stem.startswith(name + ".")]
    return problems[max(names, key=len)] if names else None


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows of a results file; SuiteError naming the first line that is not one."""
    rows = []
    try:
        text = path.read_text()
    except OSError as exc:
        raise SuiteError(f"--out {path}: {exc.strerror or exc}") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise SuiteError(f"{path}:{number}: not a JSON line (not a krex eval results file?)") from None
        if not isinstance(row, dict) or not isinstance(row.get("key"), dict):
            raise SuiteError(f"{path}:{number}: not a krex eval result (it has no key)")
        rows.append(row)
    return rows


def done_keys(rows: Iterable[dict[str, Any]]) -> set[str]:
    return {key_text(row["key"]) for row in rows}


def key_text(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True)


def evaluations_of(rows: Iterable[dict[str, Any]]) -> list[Evaluation]:
    """The rows as Evaluations (the summary's input); SuiteError for one that is not."""
    try:
        return [evaluation_from_dict({k: v for k, v in row.items() if k != "key"}) for row in rows]
    except EvaluationError as exc:
        raise SuiteError(f"a results row is not an evaluation: {exc}") from None


def row_of(evaluation: Evaluation, key: dict[str, Any]) -> str:
    """One line of the results file."""
    return json.dumps(evaluation.to_dict() | {"key": key}) + "\n"
