"""`krex bench` is an external subcommand (krex_runtime/cli/external.py):
krex runs the krex-bench program in its place, found beside the Python
running krex, then on PATH, then (a checkout used without installing) as
this Python's module; none of them: a clear error, exit 125."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from krex_runtime.cli import external, main
from krex_runtime.testing.local_runtime import command


def _program(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "krex-bench"
    program.write_text("#!/bin/sh\necho \"$0 $*\"\n")
    program.chmod(0o755)
    return program


def test_the_program_is_found_beside_python_then_on_path_then_as_a_module(tmp_path: Path) -> None:
    beside, on_path, empty = tmp_path / "bin", tmp_path / "path", tmp_path / "empty"
    empty.mkdir()
    found = _program(on_path)
    assert external.command_of("bench", beside=empty, search_path=str(on_path)) == [str(found)]
    assert external.command_of("bench", beside=_program(beside).parent, search_path=str(on_path)) == [
        str(beside / "krex-bench")]
    assert external.command_of("bench", beside=empty, search_path=str(empty)) == [sys.executable, "-m", "krex_bench"]


def test_without_the_program_krex_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KREX_RUN_DIR", str(tmp_path))  # restored after: `--run-dir` sets it
    monkeypatch.setitem(sys.modules, "krex_bench", None)  # not importable either
    for argv in (["bench", "list"], ["--run-dir", str(tmp_path), "bench", "list"], ["bench", "list", "--json"]):
        assert main(argv) == 125
        err = capsys.readouterr().err
        assert err.startswith("krex: `krex bench` runs the program krex-bench, found neither beside") and "PATH" in err


def test_krex_bench_runs_the_program_with_its_arguments_and_exit_status(tmp_path: Path) -> None:
    listed = subprocess.run([*command("krex"), "--run-dir", str(tmp_path), "bench", "list", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and '"problems"' in listed.stdout, listed.stderr
    refused = subprocess.run([*command("krex"), "bench", "run", "--scale", "0"], capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 125 and "scale must be in (0, 1]" in refused.stderr
    helped = subprocess.run([*command("krex"), "bench", "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: krex bench")


def test_completion_goes_on_into_the_program_after_krex_options(tmp_path: Path) -> None:
    answers = tmp_path / "completions"
    line = f"krex --run-dir {tmp_path} bench report --o"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "bash", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(answers)}
    subprocess.run(command("krex"), env=env, check=True, timeout=60)
    assert answers.read_text().split() == ["--out"]
