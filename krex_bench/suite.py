"""A suite of problems we did not write, in KernelBench's format, as a workload.

`krex bench run --suite DIR` points at a folder of the user's own checkout
(KernelBench's `KernelBench/level1`, say): every `*.py` file in it that
defines `class Model`, `def get_inputs` and `def get_init_inputs` is one
problem. Each command runs one file with krex_bench/suite_candidate.py: it
builds the model and inputs as the suite does and times the model's forward
with a CUDA-event timer like the suite's own, the timing inside `region()`.

The files are read where they are, never copied: this module only lists and
names them (no torch), so the runner and the report can run anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from krex_bench.workload import Candidate

# What makes a file a problem of the format: checked in its text, without importing it.
REQUIRED = (re.compile(r"^class Model\b", re.M), re.compile(r"^def get_inputs\(", re.M),
            re.compile(r"^def get_init_inputs\(", re.M))


class SuiteError(ValueError):
    """The folder or the selection cannot make a workload; the message says why in one line."""


def problems(folder: Path) -> list[Path]:
    """The folder's problem files, in name order."""
    if not folder.is_dir():
        raise SuiteError(f"--suite {folder}: not a folder")
    found = []
    for path in sorted(folder.glob("*.py")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if all(r.search(text) for r in REQUIRED):
            found.append(path)
    if not found:
        raise SuiteError(f"--suite {folder}: no file defines Model, get_inputs and get_init_inputs")
    return found


def name_of(path: Path) -> str:
    """A file's candidate name: its stem (`19_ReLU`)."""
    return path.stem


def select(folder: Path, picked: list[str] | None = None) -> list[Candidate]:
    """The suite's problems as candidates of one problem named after the
    folder (so rankings compare them all), or only those `picked`: a stem, or
    the number a stem starts with (`19` for `19_ReLU`)."""
    files = problems(folder)
    if picked:
        by_key: dict[str, Path] = {}
        for f in files:
            by_key[name_of(f)] = f
            by_key.setdefault(name_of(f).split("_", 1)[0], f)
        missing = [p for p in picked if p not in by_key]
        if missing:
            raise SuiteError(f"--suite-problems: {', '.join(missing)} not in {folder}")
        files = list(dict.fromkeys(by_key[p] for p in picked))
    group = folder.resolve().name or "suite"
    return [Candidate(group, name_of(f), {"path": str(f.resolve())}) for f in files]
