"""`krex eval`, one pair and a batch, through the real `krex` against one
runtime (policy krex, a simulated GPU), with the stand-in harness
(tests/tenants/eval_fake_harness.py: each candidate's first line says what
it does): what it prints and exits with, a batch's results file and its
resume, Ctrl-C in a batch, and command lines that name no work."""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import PY, TENANTS, module_runtime, regions_config

from krex_runtime.testing.local_runtime import Runtime, command, wait_until

HARNESS = ["--harness", f"{PY} {TENANTS / 'eval_fake_harness.py'}", "--trials", "5", "--timeout", "60"]


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("eval-cli") / "rt", policy="krex", sim=1, slots=8,
                              extra_config=regions_config())


def write(path: Path, what: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# fake: {what}\nclass ModelNew: ...\n")
    return path


@pytest.fixture
def suite(tmp_path: Path) -> tuple[Path, Path]:
    problems, candidates = tmp_path / "level1", tmp_path / "run7"
    for name in ("19_ReLU.py", "20_LeakyReLU.py", "3_Matmul.py"):
        write(problems / name, "problem")
    write(candidates / "19_ReLU.py", "correct")
    write(candidates / "19_ReLU.v2.py", "incorrect")
    write(candidates / "20_LeakyReLU" / "tiled.py", "compile")
    (candidates / "notes.txt").write_text("not a candidate\n")
    return problems, candidates


def one_line_125(done: subprocess.CompletedProcess[str], says: str) -> None:
    assert done.returncode == 125, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("krex")]
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_one_pair_prints_its_result_and_exits_by_it(rt: Runtime, suite: tuple[Path, Path]) -> None:
    problems, candidates = suite
    done = rt.krex("eval", str(problems / "19_ReLU.py"), str(candidates / "19_ReLU.py"), *HARNESS)
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("19_ReLU.py / 19_ReLU.py") and "eval:run7/19_ReLU/19_ReLU" in lines[0]
    assert "compiled yes   correct yes (5/5 input sets)   fresh check passed" in lines
    assert any(line.startswith("reference ") and " speedup " in line for line in lines), lines
    assert any(line.startswith("regions  reference ") and "verified clean (5 windows)" in line for line in lines)
    trusted = next(line for line in lines if line.startswith("trusted"))
    # Correct and trusted exits 0; times the runtime did not take from below are not trusted (exit 1).
    assert done.returncode == (0 if trusted == "trusted  yes" else 1), done.stdout
    as_json = rt.krex("eval", "--json", str(problems / "19_ReLU.py"), str(candidates / "19_ReLU.v2.py"), *HARNESS)
    assert as_json.returncode == 1
    e = json.loads(as_json.stdout)
    assert (e["failure_class"], e["correct"], e["trusted"]) == ("incorrect", False, False)
    assert e["candidate_path"] == str(candidates / "19_ReLU.v2.py") and e["check"]["failed_set"] == 2
    broken = rt.krex("eval", str(problems / "20_LeakyReLU.py"), str(candidates / "20_LeakyReLU" / "tiled.py"), *HARNESS)
    assert broken.returncode == 1 and "failure  compile_error: load_inline failed" in broken.stdout
    malformed = rt.krex("eval", str(problems / "19_ReLU.py"), str(write(candidates / "x" / "19_ReLU.py", "malformed")),
                        *HARNESS)
    one_line_125(malformed, "the result line is malformed: check.passed: expected an integer")


def test_a_batch_writes_each_result_and_resumes(rt: Runtime, suite: tuple[Path, Path], tmp_path: Path) -> None:
    problems, candidates = suite
    out = tmp_path / "results.jsonl"
    batch = ["eval", "--suite", str(problems), "--candidates", str(candidates), "--out", str(out), *HARNESS]
    first = rt.krex(*batch, "--json", "-c", "2")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert (summary["problems"], summary["evaluations"], summary["ran"], summary["skipped"]) == (2, 3, 3, 0)
    assert summary["correct_pct"] == 50.0 and summary["fast_p"]["1"] == 0.5
    assert summary["failures"] == {"compile_error": 1, "incorrect": 1}
    progress = [line for line in first.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 3 and any("20_LeakyReLU/20_LeakyReLU/tiled.py: compile_error" in p for p in progress)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["key"]["candidate"] for r in rows) == ["19_ReLU.py", "19_ReLU.v2.py", "20_LeakyReLU/tiled.py"]
    assert {r["label"] for r in rows} == {"eval:run7/19_ReLU/19_ReLU", "eval:run7/19_ReLU/19_ReLU.v2",
                                          "eval:run7/20_LeakyReLU/tiled"}
    # Again: everything is there already.
    again = rt.krex(*batch, "--resume", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["ran"] == 0 and len(out.read_text().splitlines()) == 3
    # A changed candidate is evaluated again; the rest is not.
    write(candidates / "19_ReLU.v2.py", "correct")
    changed = rt.krex(*batch, "--resume", "--json")
    summary = json.loads(changed.stdout)
    assert (summary["ran"], summary["skipped"], summary["evaluations"]) == (1, 2, 3)
    assert summary["failures"] == {"compile_error": 1} and len(out.read_text().splitlines()) == 4
    # Other options are another evaluation of every pair; the plain summary is a table.
    reseeded = rt.krex(*batch, "--resume", "--seed", "7", "--batch", "again")
    assert reseeded.returncode == 0 and len(out.read_text().splitlines()) == 7
    assert "fast_1.5" in reseeded.stdout and "failures: compile_error" in reseeded.stdout
    # Without --resume an existing results file is not touched.
    one_line_125(rt.krex(*batch), "exists: --resume to go on with it")
    assert len(out.read_text().splitlines()) == 7


def test_on_a_terminal_a_progress_bar(rt: Runtime, suite: tuple[Path, Path]) -> None:
    problems, candidates = suite
    master, slave = pty.openpty()
    proc = subprocess.Popen([*command("krex"), "eval", "--suite", str(problems), "--candidates", str(candidates),
                             *HARNESS], env=rt.env | {"COLUMNS": "120"}, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    seen = b""
    try:
        while True:  # until krex ends and the terminal's other end closes
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other end closed: krex has ended
                break
            if not chunk:
                break
            seen += chunk
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(master)
    shown = seen.decode(errors="replace")
    assert proc.returncode == 0, shown
    assert "evaluating" in shown and "3/3" in shown and "Traceback" not in shown
    assert "19_ReLU/19_ReLU.v2.py: incorrect" in shown
    assert "fast_1.5" in out  # the summary on stdout, a pipe here


def test_ctrl_c_cancels_what_runs_and_leaves_the_file_whole(rt: Runtime, tmp_path: Path) -> None:
    problems, candidates, out = tmp_path / "p", tmp_path / "c", tmp_path / "r.jsonl"
    write(problems / "1_Add.py", "problem")
    write(candidates / "1_Add.py", "correct")
    write(candidates / "1_Add.slow.py", "hang")
    proc = subprocess.Popen([*command("krex"), "eval", "--suite", str(problems), "--candidates", str(candidates),
                             "--out", str(out), *HARNESS], env=rt.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def hanging() -> list[dict]:
            rows = json.loads(rt.krex("ls", "--json", "--label", "eval:c/1_Add/1_Add.slow").stdout)["commands"]
            return [r for r in rows if r["state"] == "running"]

        wait_until(lambda: out.exists() and out.read_text().count("\n") == 1 and hanging(), 60, "the first result")
        slow = hanging()[0]["id"]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "interrupted" in err and "Traceback" not in err
    assert [json.loads(line)["candidate"] for line in out.read_text().splitlines()] == ["1_Add.py"]
    shown = json.loads(rt.krex("show", "--json", slow).stdout)
    assert shown["state"] == "cancelled"
    # One pair: the same.
    one = subprocess.Popen([*command("krex"), "eval", str(problems / "1_Add.py"), str(candidates / "1_Add.slow.py"),
                            "--batch", "single", *HARNESS], env=rt.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        def running() -> list[dict]:
            rows = json.loads(rt.krex("ls", "--json", "--label", "eval:single/1_Add/1_Add.slow").stdout)["commands"]
            return [r for r in rows if r["state"] == "running"]

        wait_until(running, 60, "the evaluation to run")
        single = running()[0]["id"]
        one.send_signal(signal.SIGINT)
        _, err = one.communicate(timeout=60)
    finally:
        if one.poll() is None:
            one.kill()
    assert one.returncode == 128 + signal.SIGINT and "Traceback" not in err, err
    assert json.loads(rt.krex("show", "--json", single).stdout)["state"] == "cancelled"


def test_command_lines_that_name_no_work(rt: Runtime, suite: tuple[Path, Path], tmp_path: Path) -> None:
    problems, candidates = suite
    p, c = str(problems / "19_ReLU.py"), str(candidates / "19_ReLU.py")
    one_line_125(rt.krex("eval"), "nothing to evaluate")
    one_line_125(rt.krex("eval", p), "nothing to evaluate")
    one_line_125(rt.krex("eval", p, str(tmp_path / "nope.py")), "no candidate file")
    one_line_125(rt.krex("eval", p, c, "--suite", str(problems)), "not both")
    one_line_125(rt.krex("eval", "--suite", str(problems)), "both --suite DIR and --candidates DIR")
    one_line_125(rt.krex("eval", "--suite", str(tmp_path / "none"), "--candidates", str(candidates)),
                 "no such folder")
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(tmp_path / "none")), "no such folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_125(rt.krex("eval", "--suite", str(empty), "--candidates", str(candidates)), "no problem files")
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(candidates), "--resume"),
                 "--resume goes on with a results file")
    one_line_125(rt.krex("eval", p, c, "--trials", "0"), "trials must be at least 1")
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(candidates), "--out",
                         str(tmp_path / "nowhere" / "r.jsonl")), "no such folder")
    one_line_125(rt.krex("eval", p, c, "--out", str(tmp_path / "r.jsonl")), "--out and --resume are a batch's")
    stray = write(candidates / "99_Conv.py", "correct")
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(candidates)),
                 f"candidate {stray}: no problem of its name")
    stray.unlink()
    write(candidates / "7_Pool" / "a.py", "correct")
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(candidates)), "no problem 7_Pool.py")
    shutil.rmtree(candidates / "7_Pool")
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(empty)), "no candidate of any problem")
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"key": {}}\nnot json\n')
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(candidates), "--out", str(junk),
                         "--resume"), "junk.jsonl:2: not a JSON line")
    junk.write_text('{"key": {}, "problem": "x"}\n')
    one_line_125(rt.krex("eval", "--suite", str(problems), "--candidates", str(candidates), "--out", str(junk),
                         "--resume"), "a results row is not an evaluation")
    # --json: the error as the document.
    as_json = rt.krex("eval", "--json")
    assert json.loads(as_json.stdout)["error"]["code"] == "usage"
