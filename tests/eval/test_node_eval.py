"""The node's side of evaluations, on a real runtime with simulated GPUs: the
compile slots, each tenant's build folders and MAX_JOBS in every command's
environment, and the harness's result line carried into the command's
record, event, snapshot, history, `krex ls` and `krex show`. Bad and huge
result lines are no result, and never harm the runtime.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import TENANTS, open_folder, regions_config, snapshot, start_refused, trace_events

from krex_runtime.commands.compile_slots import make_slots
from krex_runtime.commands.finished_record import RECORD_FILE
from krex_runtime.host.identities import processes_of
from krex_runtime.testing.local_runtime import Runtime, command, wait_until
from krex_runtime.wire.evaluation import parse_line
from krex_runtime.wire.evaluation_record import compact

PY = sys.executable
ENV_NAMES = ("KREX_COMPILE_SLOTS", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "MAX_JOBS")
PRINT_ENV = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {ENV_NAMES!r}}}))"


def result_line(**changes: Any) -> str:
    """A harness result line of schema 1 (a correct, timed candidate unless changed)."""
    times = {"trials": 100, "min_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.1, "mean_ms": 1.05, "std_ms": 0.01, "stream": "0"}
    result = {
        "schema": 1, "problem": "19_ReLU.py", "candidate": "relu_fast.py", "problem_sha256": "ab", "candidate_sha256": "cd",
        "compiled": True, "correct": True, "failure": None,
        "check": {"input_sets": 5, "passed": 5, "atol": 0.01, "rtol": 0.01, "dtype": "float32", "max_abs_error": 0.0,
                  "max_rel_error": 0.0, "failed_set": None},
        "fresh_check": {"passed": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "message": ""},
        "timing": {"reference": times | {"region": 7, "median_ms": 3.0}, "candidate": times | {"region": 8, "median_ms": 1.5}},
        "phases_s": {"load": 0.1, "compile_wait": 0.0, "compile": 1.0, "check": 0.1, "timed": 0.5},
        "harness_patched": [],
    } | changes
    return "KREX-EVAL-RESULT " + json.dumps(result, separators=(",", ":"))


def printing(*lines: str) -> list[str]:
    """argv of a command that prints `lines` on stdout."""
    return [PY, "-c", f"import sys; sys.stdout.write({''.join(line + chr(10) for line in lines)!r})"]


def run_json(rt: Runtime, *argv: str) -> dict[str, Any]:
    """The result record of `krex submit ARGV`, as the runtime sends it."""
    done = rt.krex("submit", *argv)
    assert done.returncode == 0, done.stderr
    with rt.client(timeout_s=60) as c:
        record: dict[str, Any] = c.call("wait", {"id": done.stdout.strip(), "attach": False}, timeout=60)
    return record


def eval_config(**settings: object) -> str:
    return "[eval]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())


# --- compile slots and build folders -------------------------------------------------------------------------------


def test_slots_and_build_folders_in_every_command(make_runtime: Any) -> None:
    rt = make_runtime(sim=1, extra_config=eval_config(max_compiles=3, compile_jobs=5))
    slots = rt.run_dir / "compile-slots"
    assert sorted(p.name for p in slots.iterdir()) == ["0", "1", "2"]
    assert stat.S_IMODE(slots.stat().st_mode) == 0o755
    for slot in slots.iterdir():
        st = slot.stat()
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == os.getuid()

    first = json.loads(_stdout(rt, "--share", "a", "--", *[PY, "-c", PRINT_ENV]))
    assert first["KREX_COMPILE_SLOTS"] == str(slots) and first["MAX_JOBS"] == "5"
    folder = Path(first["TORCH_EXTENSIONS_DIR"]).parent
    assert folder.parent.parent == rt.run_dir / "tenant-builds" and folder.name == "0"
    assert Path(first["TRITON_CACHE_DIR"]) == folder / "triton"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and Path(first["TORCH_EXTENSIONS_DIR"]).is_dir()
    # The same key reuses its folder; a command's own values do not win (eval.command_build_env is off).
    again = json.loads(_stdout(rt, "--share", "a", "--", PY, "-c", PRINT_ENV,
                               env={"TORCH_EXTENSIONS_DIR": "/tmp/elsewhere", "MAX_JOBS": "99"}))
    assert again == first
    # Another key of the same submitter: a folder of its own.
    other = json.loads(_stdout(rt, "--share", "b", "--", PY, "-c", PRINT_ENV))
    assert Path(other["TORCH_EXTENSIONS_DIR"]).parent.parent != folder.parent


def test_commands_of_one_key_running_at_once_get_folders_of_their_own(make_runtime: Any) -> None:
    rt = make_runtime(sim=1, extra_config=eval_config(max_compiles=1))
    hold = f"{PRINT_ENV}; import sys, time; sys.stdout.flush(); time.sleep(60)"
    first = rt.krex("submit", "--share", "k", "--", PY, "-c", hold).stdout.strip()
    out = rt.run_dir / "output" / f"{first}.stdout"
    wait_until(lambda: out.exists() and out.read_text().strip(), 60, "the first command's environment")
    second = json.loads(_stdout(rt, "--share", "k", "--", PY, "-c", PRINT_ENV))
    held = json.loads(out.read_text())
    assert Path(held["TORCH_EXTENSIONS_DIR"]).parent.name == "0"
    assert Path(second["TORCH_EXTENSIONS_DIR"]).parent.name == "1"
    assert rt.krex("cancel", first).returncode == 0
    rt.krex("wait", first)
    # Both given back: the next command of the key takes the lowest again.
    third = json.loads(_stdout(rt, "--share", "k", "--", PY, "-c", PRINT_ENV))
    assert Path(third["TORCH_EXTENSIONS_DIR"]).parent.name == "0"


def test_a_command_own_build_env_wins_when_the_operator_allows_it(make_runtime: Any, tmp_path: Path) -> None:
    rt = make_runtime(sim=1, extra_config=eval_config(command_build_env=True))
    mine = json.loads(_stdout(rt, "--", PY, "-c", PRINT_ENV, env={"TORCH_EXTENSIONS_DIR": str(tmp_path)}))
    assert mine["TORCH_EXTENSIONS_DIR"] == str(tmp_path) and mine["MAX_JOBS"] == "2"
    assert mine["TRITON_CACHE_DIR"].endswith("/triton")


WRITE_AND_LIST = ("import json, os; torch = os.environ['TORCH_EXTENSIONS_DIR']; seen = sorted(os.listdir(torch)); "
                  "open(os.path.join(torch, 'built'), 'w').close(); print(json.dumps(seen))")


@pytest.mark.parametrize("fresh, second", [(False, ["built"]), (True, [])], ids=["kept", "fresh"])
def test_a_cache_outlives_its_command_unless_fresh_builds(make_runtime: Any, fresh: bool, second: list[str]) -> None:
    rt = make_runtime(sim=1, extra_config=eval_config(fresh_builds=fresh))
    assert json.loads(_stdout(rt, "--", PY, "-c", WRITE_AND_LIST)) == []
    assert json.loads(_stdout(rt, "--", PY, "-c", WRITE_AND_LIST)) == second


def test_a_build_folder_that_cannot_be_made_stops_the_start_in_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    rt = Runtime(tmp_path / "rt", sim=1, extra_config=eval_config(build_dir=str(blocked / "builds")))
    line = start_refused(rt)
    assert "cannot make the compile slots or build folders" in line and str(blocked) in line, line


def test_slots_are_made_afresh(tmp_path: Path) -> None:
    """A smaller count leaves no stale slot; a link in the folder's place is not followed."""
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "compile-slots").symlink_to(target)
    folder = make_slots(tmp_path, 5)
    assert not folder.is_symlink() and sorted(p.name for p in folder.iterdir()) == ["0", "1", "2", "3", "4"]
    assert list(target.iterdir()) == []
    make_slots(tmp_path, 2)
    assert sorted(p.name for p in folder.iterdir()) == ["0", "1"]


def _stdout(rt: Runtime, *args: str, env: dict[str, str] | None = None) -> str:
    """The last stdout line of `krex run ARGS`, submitted with `env` added to the submitter's environment."""
    done = subprocess.run([*command("krex"), "run", *args], env=rt.env | (env or {}), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


# --- tenants with uids of their own --------------------------------------------------------------------------------

FIRST_UID, UIDS, GROUP = 61200, 8, 61199
SYSTEM_PY = "/usr/bin/python3"  # the runtime's own Python may sit where other uids cannot reach
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0 or not Path(SYSTEM_PY).exists(), reason=f"needs root and {SYSTEM_PY}")

# Writes a file into its build folder, one into /tmp (its uid's leftover: gone
# once the uid was swept), reports what it sees, and tries the folder named.
TENANT = r"""
import errno, json, os, sys
torch = os.environ["TORCH_EXTENSIONS_DIR"]
seen = {"uid": os.getuid(), "torch": torch, "cached": sorted(os.listdir(torch))}
with open(os.path.join(torch, f"built-by-{os.getuid()}"), "w") as f:
    f.write("x")
open(f"/tmp/krex-eval-leftover-{os.getuid()}", "w").close()
for name in sys.argv[1:]:
    try:
        os.listdir(name)
        seen[name] = "ok"
    except OSError as exc:
        seen[name] = errno.errorcode[exc.errno]
print(json.dumps(seen))
"""


@pytest.fixture
def open_root() -> Iterator[Path]:
    yield from open_folder("krex-eval-")


@AS_ROOT
def test_build_folders_of_tenants_with_uids_of_their_own(open_root: Path, make_runtime: Any) -> None:
    rt = make_runtime(parent=open_root, policy="krex", sim=1, runtime_extra='read_only_group = "*"',
                      tenants_extra=f'uid_range = [{FIRST_UID}, {UIDS}]\ngroup = "{GROUP}"\n')
    alice = json.loads(_stdout(rt, "--share", "alice", "--", SYSTEM_PY, "-c", TENANT))
    folder = Path(alice["torch"]).parent
    assert FIRST_UID <= alice["uid"] < FIRST_UID + UIDS and alice["cached"] == []
    # Given back: the runtime's and closed, so the uid's next holder cannot enter it.
    st = folder.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    leftover = Path(f"/tmp/krex-eval-leftover-{alice['uid']}")
    wait_until(lambda: not leftover.exists(), 60, "the sweep of the first uid's leftovers")

    bob = json.loads(_stdout(rt, "--share", "bob", "--", SYSTEM_PY, "-c", TENANT, str(folder), alice["torch"]))
    assert bob["uid"] != alice["uid"] and Path(bob["torch"]).parent != folder
    assert bob[str(folder)] == "EACCES" and bob[alice["torch"]] == "EACCES"

    # Alice again, under another uid: her cache survived her uid's sweep and is her new uid's now.
    again = json.loads(_stdout(rt, "--share", "alice", "--", SYSTEM_PY, "-c", TENANT))
    assert again["torch"] == alice["torch"] and again["uid"] != alice["uid"]
    assert again["cached"] == [f"built-by-{alice['uid']}"]
    handed = Path(again["torch"]) / f"built-by-{alice['uid']}"
    assert handed.stat().st_uid == again["uid"]
    wait_until(lambda: not any(processes_of(u) for u in range(FIRST_UID, FIRST_UID + UIDS)), 30, "the tenants gone")


# Opens its build folder to everyone, then waits until another tenant has put a file in it.
CARELESS = r"""
import os, sys, time
torch = os.environ["TORCH_EXTENSIONS_DIR"]
os.chmod(os.path.dirname(torch), 0o777)
os.chmod(torch, 0o777)
open(os.path.join(torch, "mine"), "w").close()
print(torch, flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(torch, "planted")) and time.monotonic() < deadline:
    time.sleep(0.05)
"""
PLANT = "import os, sys; open(os.path.join(sys.argv[1], 'planted'), 'w').close(); print('planted')"


@AS_ROOT
def test_what_another_tenant_put_in_an_opened_folder_goes(open_root: Path, make_runtime: Any) -> None:
    """A tenant that opens its folder lets others in: at its key's next command
    their entries are gone, its own are the new command's."""
    rt = make_runtime(parent=open_root, policy="krex", sim=1, runtime_extra='read_only_group = "*"',
                      tenants_extra=f'uid_range = [{FIRST_UID}, {UIDS}]\ngroup = "{GROUP}"\n')
    careless = rt.krex("submit", "--share", "alice", "--", SYSTEM_PY, "-c", CARELESS).stdout.strip()
    out = rt.run_dir / "output" / f"{careless}.stdout"
    wait_until(lambda: out.exists() and out.read_text().strip(), 60, "the careless tenant's folder")
    torch = out.read_text().strip()
    assert _stdout(rt, "--share", "mallory", "--", SYSTEM_PY, "-c", PLANT, torch) == "planted"
    rt.krex("wait", careless)
    again = json.loads(_stdout(rt, "--share", "alice", "--", SYSTEM_PY, "-c", TENANT))
    assert again["torch"] == torch and again["cached"] == ["mine"]
    assert Path(torch, "mine").stat().st_uid == again["uid"]
    wait_until(lambda: not any(processes_of(u) for u in range(FIRST_UID, FIRST_UID + UIDS)), 30, "the tenants gone")


# --- the result line in the record ---------------------------------------------------------------------------------


def test_a_result_line_becomes_the_command_evaluation(make_runtime: Any) -> None:
    rt = make_runtime(sim=1)
    record = run_json(rt, "--label", "eval:b1/19_ReLU.py/relu_fast.py", "--", *printing("compiling...", result_line()))
    evaluation = record["evaluation"]
    report = parse_line(result_line())
    assert report is not None and evaluation == compact(report.to_dict())
    assert evaluation["speedup"] == 2.0 and evaluation["regions"] == [7, 8] and evaluation["failure"] is None
    assert [e.get("evaluation") for e in trace_events(rt, "command_finished") if e["id"] == record["id"]] == [evaluation]
    commands = {c["id"]: c for c in snapshot(rt)["commands"]}
    wait_until(lambda: {c["id"]: c for c in snapshot(rt)["commands"]}[record["id"]]["evaluation"] == evaluation, 10,
               "the snapshot's evaluation")
    assert commands  # the snapshot lists the command
    with rt.client() as c:
        assert c.show(record["id"]).record["evaluation"] == evaluation
        listed = c.call("ls", {})["commands"]
    assert [row.get("evaluation") for row in listed if row["id"] == record["id"]] == [evaluation]
    ls = rt.krex("ls")
    assert ls.returncode == 0 and "EVAL" in ls.stdout.splitlines()[0] and "2.00x" in ls.stdout
    show = rt.krex("show", record["id"])
    assert show.returncode == 0 and "evaluation" in show.stdout and "2.00x" in show.stdout
    recorded = [json.loads(line) for line in (rt.run_dir / RECORD_FILE).read_text().splitlines()]
    assert any(r.get("result", r).get("evaluation") == evaluation for r in recorded if isinstance(r, dict))


def test_a_failed_candidate_is_an_evaluation_too(make_runtime: Any) -> None:
    rt = make_runtime(sim=1)
    failure = {"class": "compile_error", "message": "error: expected ';'\nat line 3", "detail": "x" * 500}
    record = run_json(rt, "--", *printing(result_line(compiled=False, correct=None, failure=failure, timing=None,
                                                      fresh_check=None)))
    evaluation = record["evaluation"]
    assert evaluation["failure"] == "compile_error" and evaluation["message"] == "error: expected ';' at line 3"
    assert evaluation["speedup"] is None and evaluation["regions"] == [] and "detail" not in evaluation
    assert "compile_error" in rt.krex("ls").stdout


EVAL = TENANTS / "eval"


def test_the_harness_under_the_runtime(make_runtime: Any) -> None:
    """The real harness (on the torch stand-in, its load_inline a real C
    compile): its extension is built in the command's build folder, and its
    result line is the command's evaluation, with its two regions."""
    rt = make_runtime(policy="krex", sim=1, extra_config=regions_config() + eval_config(max_compiles=1))
    stand_ins = os.pathsep.join(p for p in (str(TENANTS / "torch_on_sim"), rt.env.get("PYTHONPATH", "")) if p)
    records = {}
    for candidate in ("relu_add__inline", "relu_add__compile_error"):
        argv = [PY, "-m", "krex_runtime.eval.harness", "--problem", str(EVAL / "relu_add.py"), "--candidate",
                str(EVAL / f"{candidate}.py"), "--trials", "5", "--warmup", "1"]
        done = subprocess.run([*command("krex"), "submit", "--label", f"eval:ci/relu_add/{candidate}", "--", *argv],
                              env=rt.env | {"PYTHONPATH": stand_ins}, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        with rt.client(timeout_s=240) as c:
            records[candidate] = c.call("wait", {"id": done.stdout.strip(), "attach": False}, timeout=240)
    honest, broken = records["relu_add__inline"], records["relu_add__compile_error"]
    evaluation = honest.get("evaluation")
    assert evaluation is not None, (rt.run_dir / "output" / f"{honest['id']}.stderr").read_text()[-3000:]
    assert (evaluation["compiled"], evaluation["correct"], evaluation["failure"]) == (True, True, None)
    assert evaluation["speedup"] is not None and len(evaluation["regions"]) == 2
    assert set(evaluation["regions"]) <= {r["region"] for r in honest["regions"]}
    assert broken["evaluation"]["failure"] == "compile_error" and broken["evaluation"]["compiled"] is False
    built = [p for p in (rt.run_dir / "tenant-builds").rglob("torch_extensions/*") if p.is_dir()]
    assert built, "load_inline built nowhere in the build folders"


BAD_LINES = {
    "not json": "KREX-EVAL-RESULT {not json",
    "another schema": result_line(schema=2),
    "unknown failure class": result_line(failure={"class": "fast", "message": ""}),
    "times missing their fields": result_line(timing={"reference": {"median_ms": 0, "region": 1},
                                            "candidate": {"median_ms": 1.0, "region": 2}}),
    "a boolean region": result_line(timing={"reference": {"median_ms": 1.0, "region": True},
                                            "candidate": {"median_ms": 1.0, "region": 2}}),
    "not an object": "KREX-EVAL-RESULT [1, 2]",
    "nested too deep": "KREX-EVAL-RESULT " + "[" * 50_000 + "]" * 50_000,
    "longer than the tail read": result_line(problem="p" * 70_000),
}


def test_bad_and_huge_result_lines_are_no_evaluation(make_runtime: Any) -> None:
    rt = make_runtime(sim=1)
    for name, line in BAD_LINES.items():
        record = run_json(rt, "--", *printing("x", line))
        assert "evaluation" not in record, name
    # Not the last line: no result either (the harness prints it last).
    assert "evaluation" not in run_json(rt, "--", *printing(result_line(), "trailing words"))
    assert "evaluation" not in run_json(rt, "--", PY, "-c", "pass")  # no output at all
    # The runtime is none the worse: the next good line is read.
    assert run_json(rt, "--", *printing(result_line()))["evaluation"]["speedup"] == 2.0
    with rt.client() as c:
        assert c.call("status")["gpus"][0]["running"] == []


# --- the config --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, says", [
    ("[eval]\nmax_compiles = 5000\n", "eval.max_compiles must be between 0 and 4096"),
    ("[eval]\ncompile_jobs = 0\n", "eval.compile_jobs must be between 1 and 1024"),
    ("[eval]\nfresh_builds = 'yes'\n", "eval.fresh_builds: expected true or false, got a string"),
    ("[eval]\nbuild_dir = 'relative'\n", "eval.build_dir must be an absolute path"),
])
def test_a_bad_eval_section_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "krex.toml"
    path.write_text(text)
    for program, args in (("krex-runtime", ("--check-config",)), ("krex", ("check-config",))):
        done = subprocess.run([*command(program), *args, str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 125 and done.stdout == "", done
        assert done.stderr.startswith(f"{program}: {path}: {says}") and len(done.stderr.splitlines()) == 1, done.stderr


def test_the_compile_count_follows_the_tenant_cores() -> None:
    from krex_runtime.node.config import EvalSection

    assert EvalSection().compiles_for(14) == 3  # 16 cores, one GPU, a reserved core and its sibling
    assert EvalSection().compiles_for(1) == 1 and EvalSection(compile_jobs=1).compiles_for(112) == 56
    assert EvalSection(max_compiles=7).compiles_for(1) == 7
