"""The evaluation (`krex bench`): its workload, its arguments and whole runs on a simulated GPU (its figures: test_bench_figures.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from krex_bench import analysis, runner, setups, workload
from krex_runtime.testing.local_runtime import command


def test_workload_covers_the_buckets_and_scales_deterministically() -> None:
    full = workload.select(1.0)
    assert len(full) == sum(len(p.candidates) for p in workload.PROBLEMS)
    assert len({c.key for c in full}) == len(full)
    half = workload.select(0.5)
    assert [c.key for c in half] == [c.key for c in workload.select(0.5)]
    assert all(sum(1 for c in half if c.problem == p.name) >= 2 for p in workload.PROBLEMS)
    with pytest.raises(ValueError, match="scale"):
        workload.select(0.0)
    with pytest.raises(KeyError, match="no candidate"):
        workload.candidate("gelu", "nope")


def test_the_matrix_has_every_variant_at_every_concurrency() -> None:
    plan = setups.matrix((4, 16))
    labels = [s.label for s in plan]
    assert labels[:2] == ["native", "native-repeat"]
    assert len(plan) == 2 + 2 * (1 + len(setups.VARIANTS))
    assert "krex driver-lock/pooled/gpu-only c16" in labels and "krex preload/forked/gpu+cpu c16" in labels
    with pytest.raises(ValueError, match="BACKEND/MODE/PROTECTION"):
        setups.matrix((4,), ("preload/process",))
    settled = setups.matrix((16,), ("preload/process/gpu-only",), native=0, ungated=False, settles=(0.2, None))
    assert [s.label for s in settled] == ["krex preload/process/gpu-only c16 settle 0.2s", "krex preload/process/gpu-only c16"]
    canary = setups.matrix((16,), ("preload/process/gpu-only",), native=0, ungated=False, canary_too=True)
    assert [s.label for s in canary] == ["krex preload/process/gpu-only c16", "krex preload/process/gpu-only c16 canary"]
    assert setups.Setup.from_dict(canary[1].to_dict()) == canary[1]
    assert setups.Setup.from_dict(settled[0].to_dict()) == settled[0]  # merged runs keep the setting
    gaps = setups.matrix((16,), ("preload/pooled/gpu-only",), native="repeat", ungated=False, gaps=(0.0, 0.02))
    assert [s.label for s in gaps] == [
        "native-repeat", "krex preload/pooled/gpu-only c16 gap 0ms", "krex preload/pooled/gpu-only c16 gap 20ms",
    ]  # fmt: skip
    assert setups.Setup.from_dict(gaps[2].to_dict()) == gaps[2]
    assert [s.label for s in setups.matrix((16,), (), native="native", ungated=False)] == ["native"]
    long = setups.matrix((16,), ("preload/process/gpu-only",), native=0, ungated=False, settle_longs=(0.5, 0.0))
    assert [s.label for s in long] == ["krex preload/process/gpu-only c16 settle-long 0.5s", "krex preload/process/gpu-only c16"]
    assert setups.Setup.from_dict(long[0].to_dict()) == long[0]
    from krex_bench import runner, workload

    cand = workload.candidate("gelu", "torch")
    opts = runner.Options(gpu=0, sim=False, scale=1.0, problems=None, seed=1)
    assert runner.argv_for(cand, opts, long[0])[-2:] == ["--settle-long-s", "0.5"]  # the candidate decides by its kernel
    assert "--settle-long-s" not in runner.argv_for(cand, opts, settled[0])


def krex_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command("krex"), "bench", *args], capture_output=True, text=True, timeout=600)


def test_bad_arguments_are_refused_before_anything_starts(tmp_path: Path) -> None:
    for args, message in (
        (["--scale", "0"], "scale must be in (0, 1]"),
        (["--variants", "preload/sometimes/gpu+cpu"], "is not BACKEND/MODE/PROTECTION"),
        (["--problems", "fft"], "unknown problem 'fft'"),
        (["--native", "0"], "--native 0 needs --merge"),
        (["--native", "repeat"], "--native repeat needs --merge RESULTS.json with the native run"),
        (["--gap-s", "0,2"], "--gap-s values must be within [0, 1] seconds"),
        (["--clock-tolerance", "0"], "--clock-tolerance must be in (0, 1)"),
        (["--settle-s", "0,2"], "--settle-s values must be within [0, 1] seconds"),
        (["--suite-trials", "0"], "--suite-trials must be between 1 and 10000"),
        (["--settle-long-s", "0,2"], "--settle-long-s values must be within [0, 1] seconds"),
        (["--watch-clock-ms", "-1"], "--watch-clock-ms must be between 0 (off) and 1000"),
        (["--repeats", "0"], "--repeats must be between 1 and 100"),
        (["--gpus", "0,0"], "--gpus names a GPU twice"),
        (["--gpus", "two"], "--gpus takes a number of GPUs (2) or GPU indices (0,1)"),
        (["--gpus", "2", "--gpu", "1"], "give --gpu (one GPU) or --gpus (a set), not both"),
        (["--gpus", "2", "--variants", "preload/pooled/gpu-only"], "in process mode only: not preload/pooled/gpu-only"),
        (["--gpus", "0,1", "--native-mode", "pooled"], "--gpus runs native in process mode"),
        (["--variants", "none", "--no-ungated", "--native", "0", "--merge", "missing.json"], "cannot read its runs"),
    ):
        done = krex_bench("run", "--sim", "--out", str(tmp_path), *args)
        assert done.returncode == 125, done.stderr
        assert message in done.stderr
    assert not (tmp_path / "results.json").exists()
    # A usage error is a KREX failure too (125), and --json failures are one document.
    done = krex_bench("run", "--no-such-option")
    assert done.returncode == 125 and "unrecognized arguments: --no-such-option" in done.stderr
    done = krex_bench("run", "--json", "--sim", "--scale", "0", "--out", str(tmp_path))
    assert done.returncode == 125 and "scale must be in (0, 1]" in json.loads(done.stdout)["error"]["reason"]


def test_bench_list_json_is_one_document() -> None:
    done = krex_bench("list", "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert {p["name"] for p in listing["problems"]} == set(workload.BY_NAME)
    assert "preload/forked/gpu+cpu" in listing["variants"]


def test_a_simulated_run_measures_every_setup_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = krex_bench(
        "run", "--sim", "--scale", "0.25", "--problems", "matmul_bf16,gelu", "--concurrency", "2", "--repeats", "2",
        "--variants", "preload/process/gpu+cpu,preload/forked/gpu+cpu,driver-lock/pooled/gpu-only", "--out", str(out),
        "--work-dir", str(tmp_path / "work"), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)  # the whole of stdout: lines and bar went to stderr
    assert document["failed"] is False and document["results"] == str(out / "results.json")
    assert "setups x" in done.stderr
    data = json.loads((out / "results.json").read_text())
    labels = [r["setup"]["label"] for r in data["runs"]]
    # By default no candidate asks its region to settle (the runtime decides): no krex label says so.
    assert labels == ["native", "native-repeat", "ungated c2"] + [
        f"krex {v} c2" for v in ("preload/process/gpu+cpu", "preload/forked/gpu+cpu", "driver-lock/pooled/gpu-only")
    ]  # fmt: skip
    # --repeats 2: every candidate measured twice per setup, every measurement kept with its repeat index
    assert data["repeats"] == 2 and len(data["workload"]) == 4
    for run in data["runs"]:
        assert run["failures"] == [] and len(run["results"]) == 8 and run["repeats"] == 2, run
        assert {r["problem"] for r in run["results"]} == {"matmul_bf16", "gelu"}
        assert sorted((r["problem"], r["candidate"], r["repeat"]) for r in run["results"]) == sorted(
            (*key.split("/"), repeat) for key in data["workload"] for repeat in (0, 1))
    # Submitted in rounds, the same order for every setup; one at a time, native ran them in that order.
    opts = runner.Options(sim=True, scale=0.25, problems=["matmul_bf16", "gelu"], repeats=2)
    order = [(c.key, repeat) for c, repeat in runner.submissions(opts)]
    assert [r for _, r in order] == [0] * 4 + [1] * 4
    for run in data["runs"][:2]:
        ran = sorted(run["results"], key=lambda r: r["started"])
        assert [(f"{r['problem']}/{r['candidate']}", r["repeat"]) for r in ran] == order
    assert data["simulated"] is True
    report = (out / "report.md").read_text()
    assert "Simulated GPU: these figures are the simulator's, not a GPU's." in report
    assert "| krex driver-lock/pooled/gpu-only c2 | 8 | 0 |" in report
    assert "- Workload: 4 candidates x 2 repeats = 8 commands (scale 0.25)" in report
    assert "Region-serialisation bound: " in report and "cmds/min = 60 s / " in report
    assert "## Within-measurement spread" in report and "| native | 8 | +" in report  # native's own spread
    assert "Clock-matched: only the measurements whose SM clock" in report  # simulated candidates report clocks
    assert "One flip moves a group's rate by (points): " in report  # the flip rates' resolution per gap group
    assert "Unsteady: kernels of 1 ms or more whose placements' medians" in report
    assert all(len(r["placement_medians_ms"]) == 4 for run in data["runs"] for r in run["results"])
    assert all(r["sm_clock_mhz"] for run in data["runs"] for r in run["results"])
    summary = json.loads((out / "report.json").read_text())
    krex = next(r for r in summary["rows"] if r["label"] == "krex preload/process/gpu+cpu c2")
    assert krex["ok"] == 8 and krex["throughput_per_min"] > 0
    assert summary["region_bound"]["n"] == 8 and krex["vs_region_bound"] == pytest.approx(
        krex["throughput_per_min"] / summary["region_bound"]["per_min"])
    # Every region exclusive: verified, or perturbed where this shared machine's
    # two cores kept a measuring thread waiting (regions/hold_watch.py).
    assert set(data["runs"][3].get("verdicts")) <= {"verified", "perturbed"}, data["runs"][3].get("verdicts")
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The report can be made again from the results alone, and runs can be merged.
    again = krex_bench("report", str(out / "results.json"), "--out", str(tmp_path / "again"), "--json")
    assert again.returncode == 0, again.stderr
    assert str(tmp_path / "again" / "report.md") in json.loads(again.stdout)["written"]
    assert (tmp_path / "again" / "report.md").read_text() == report
    # A setup measured again replaces its earlier run in a merge: one row per setup, the later one.
    violations = ["processes: pid 9 uses the GPU", "processes: pid 8 uses the GPU", "gate: tenant t3 made 1 call"]
    # Result lines with every trial (--trial-detail) are read alike and their rows never printed.
    detailed = [{**r, "trials": [[0.5, 1, 2, 3.5, 0, 0, 0]], "trial_fields": ["ms", "start_ns", "end_ns", "runq_wait_us",
                 "involuntary", "minor_faults", "major_faults"]} for r in data["runs"][3]["results"]]
    rerun = {**data, "runs": [{**data["runs"][3], "results": detailed, "wall_s": 123.0, "violations": violations}]}
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    both = krex_bench("report", str(out / "results.json"), str(tmp_path / "rerun.json"), "--out", str(tmp_path / "both"))
    assert both.returncode == 0, both.stderr
    lines = (tmp_path / "both" / "report.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("| krex preload/process/gpu+cpu c2 | 8 | 0 |")]
    assert len(rows) == 1 and "| 123.0 |" in rows[0], rows
    assert not any("runq_wait_us" in line or "trial_fields" in line for line in lines)
    assert "trial" not in (tmp_path / "both" / "report.json").read_text()
    assert "- krex preload/process/gpu+cpu c2: processes 2, gate 1" in lines  # why its regions were not verified
    _check_pool_replacements_reported(data, out, tmp_path)


def _check_pool_replacements_reported(data: dict, out: Path, tmp_path: Path) -> None:
    """The pooled run says whether its commands retired their context processes
    (here none did), and a report of a run that did says why, by reason."""
    pooled = data["runs"][5]
    assert pooled["pool_replaced"] == {}, pooled["pool_replaced"]
    retired = {**data, "runs": [{**pooled, "pool_replaced": {"state-changed: pynvml.nvmlLib": 3}}]}
    (tmp_path / "retired.json").write_text(json.dumps(retired))
    assert krex_bench("report", str(out / "results.json"), str(tmp_path / "retired.json"),
                      "--out", str(tmp_path / "retired")).returncode == 0
    assert "- krex driver-lock/pooled/gpu-only c2: 3 `state-changed: pynvml.nvmlLib`" in (
        tmp_path / "retired" / "report.md").read_text().splitlines()


def test_a_simulated_run_on_a_set_of_gpus_holds_its_regions_over_the_set(tmp_path: Path) -> None:
    """`--gpus 0,1` on two simulated GPUs: every command of every setup runs on
    both, as `krex run --gpus 0,1` does, and each region it holds is granted
    on both GPUs under one region id; `all` variants are those in process mode."""
    out, work = tmp_path / "out", tmp_path / "work"
    done = krex_bench(
        "run", "--sim", "--gpus", "0,1", "--scale", "0.25", "--problems", "matmul_bf16,gelu", "--concurrency", "2",
        "--no-ungated", "--out", str(out), "--work-dir", str(work), "--keep", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["gpus"] == [0, 1]
    labels = [r["setup"]["label"] for r in data["runs"]]
    assert labels == ["native", "native-repeat"] + [f"krex {v} c2" for v in setups.VARIANTS if "/process/" in v]
    for run in data["runs"]:
        assert run["failures"] == [] and len(run["results"]) == 4, run
        assert all(r["gpus"] == [0, 1] for r in run["results"]), run
    for n, run in enumerate(data["runs"]):
        if run["setup"]["kind"] != "krex":
            continue
        events = [json.loads(line) for line in (work / f"{n:02d}" / "run" / "trace.jsonl").read_text().splitlines()[1:]]
        granted = [e for e in events if e["type"] == "region_granted" and e.get("kind") == "region"]
        by_region: dict[int, set[int]] = {}
        for e in granted:
            assert e["gpus"] == [0, 1], e
            by_region.setdefault(e["region"], set()).add(e["gpu"])
        assert len(by_region) == 4 and all(gpus == {0, 1} for gpus in by_region.values()), by_region
        # Each region certified on each of its GPUs: exclusive, verified or perturbed where this shared
        # machine's load kept the measuring thread waiting (the runtime's own bound, not the tests').
        verdicts = run["verdicts"]
        assert sum(verdicts.values()) == 8 and set(verdicts) <= {"verified", "perturbed"}, verdicts


def test_a_report_without_a_native_run_says_why(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"workload": [], "runs": [], "simulated": True, "machine": {}, "date": "", "scale": 1, "argv": []}))
    done = krex_bench("report", str(results))
    assert done.returncode != 0
    assert "no native run" in done.stderr


def test_without_a_usable_gpu_it_stops_at_the_first_setup_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = krex_bench(
        "run", "--scale", "0.25", "--problems", "softmax,gelu", "--concurrency", "2", "--out", str(out),
        "--work-dir", str(tmp_path / "work"),
    )  # fmt: skip
    data = json.loads((out / "results.json").read_text())
    if done.returncode == 0 or not data.get("stopped"):
        pytest.skip("this machine has a GPU a runtime can serve")
    assert done.returncode == 125 and "Traceback" not in done.stderr and "AssertionError" not in done.stderr
    assert len(data["runs"]) == 1, [r.get("error") for r in data["runs"]]  # not every setup, each failing alike
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("krex bench: stopped: a setup's runtime did not start: krex-runtime: ") and "--sim" in last
    assert "[2/" not in done.stderr


@pytest.mark.gpu
def test_a_small_gpu_run_has_every_command_ok(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = krex_bench(
        "run", "--scale", "0.25", "--problems", "softmax,gelu", "--concurrency", "4",
        "--variants", "preload/process/gpu+cpu", "--out", str(out), "--work-dir", str(tmp_path / "work"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "results.json").read_text())
    for run in data["runs"]:
        assert run["failures"] == [] and len(run["results"]) == 4, run
        assert all(r["sm_clock_mhz"] for r in run["results"])


def test_progress_bar_on_a_terminal_and_plain_lines_elsewhere() -> None:
    import io

    from rich.console import Console

    from krex_bench.progress import SetupProgress

    screen = io.StringIO()
    with SetupProgress(Console(file=screen, force_terminal=True, width=120, color_system=None)) as meter:
        meter.begin("krex preload/process/gpu+cpu c2", 4)
        meter.advance()
        meter.advance()
        meter._bar.refresh()
        meter.line("[1/2] native: 4 ok, 0 failed in 1.0 s")
        meter.end()
    drawn = screen.getvalue()
    assert "krex preload/process/gpu+cpu c2" in drawn and "2/4 commands" in drawn and "ETA" in drawn, drawn
    assert "[1/2] native: 4 ok, 0 failed in 1.0 s" in drawn

    plain = io.StringIO()
    with SetupProgress(Console(file=plain, force_terminal=False, width=40)) as meter:
        meter.begin("native", 4)
        meter.advance()
        meter.line("[1/2] native: 4 ok, 0 failed in 1.0 s and a line longer than forty columns")
        meter.end()
    assert plain.getvalue() == "[1/2] native: 4 ok, 0 failed in 1.0 s and a line longer than forty columns\n"


def test_every_bucket_has_eight_candidates_at_the_default_scale() -> None:
    """From each candidate's documented native time on the H200 (workload.py,
    listed in docs/BENCHMARKS.md): the default workload has at least
    MIN_P95_N candidates in every bucket, so each p95 can be quoted."""
    from krex_bench import arguments, report

    default_scale = arguments.build_parser().parse_args(["run"]).scale
    picked = workload.select(default_scale)
    assert all(c.native_ms is not None for c in picked)
    counts = {name: sum(1 for c in picked if analysis.bucket_of(c.native_ms) == name) for name, _, _ in analysis.BUCKETS}
    assert min(counts.values()) >= analysis.MIN_P95_N, counts
    doc = (Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md").read_text()
    assert report.workload_table() in doc, "docs/BENCHMARKS.md: paste `krex bench list --markdown`"


SUITE_PROBLEM = """import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.rand(4)]

def get_init_inputs():
    return []
"""


def test_a_suite_in_kernelbench_format_is_a_workload_read_where_it_is(tmp_path: Path) -> None:
    """krex bench run --suite DIR: every file with a Model, get_inputs and
    get_init_inputs is one command of the suite's candidate; the files are
    run from the folder, never copied; a selection names stems or numbers."""
    from krex_bench import runner, suite

    level = tmp_path / "level1"
    level.mkdir()
    for name in ("1_Double.py", "19_ReLU.py", "2_Other.py"):
        (level / name).write_text(SUITE_PROBLEM)
    (level / "helper.py").write_text("def get_inputs():\n    return []\n")  # not a problem: no Model
    picked = suite.select(level)
    assert [(c.problem, c.name) for c in picked] == [("level1", "19_ReLU"), ("level1", "1_Double"), ("level1", "2_Other")]
    assert [c.name for c in suite.select(level, ["19", "2_Other"])] == ["19_ReLU", "2_Other"]
    with pytest.raises(suite.SuiteError, match="7 not in"):
        suite.select(level, ["7"])
    with pytest.raises(suite.SuiteError, match="no file defines Model"):
        suite.select(tmp_path)
    opts = runner.Options(suite=level, suite_problems=["1"], suite_trials=12)
    (only,) = runner.commands(opts)
    argv = runner.argv_for(only, opts, setups.Setup("krex", 16))
    assert argv[1:] == ["-m", "krex_bench.suite_candidate", str(level / "1_Double.py"), "--trials", "12"]
    with pytest.raises(ValueError, match="no simulated form"):
        runner.commands(runner.Options(suite=level, sim=True))
    done = krex_bench("run", "--suite", str(tmp_path / "missing"), "--native", "native", "--variants", "none")
    assert done.returncode == 125 and "not a folder" in done.stderr


def test_the_regions_integrity_is_counted_per_setup(tmp_path: Path) -> None:
    from krex_bench.runner import integrity_findings
    from krex_runtime.wire.trace.jsonl import TraceWriter

    writer = TraceWriter(tmp_path / "trace.jsonl", {"node": "n"})
    writer.write({"seq": 1, "t": 1.0, "type": "runtime_started", "node": "n", "policy": "krex", "pid": 1, "gpus": [
        {"index": 0, "uuid": "u", "name": "g", "memory_total": 1, "simulated": True, "slots": 1}]})
    clean = {"windows": 3, "clean": True, "summary": "integrity: clean (3 timed windows)", "flags": {}}
    flagged = {"windows": 2, "clean": False, "summary": "integrity: flagged (escaped 1; 2 timed windows)",
               "flags": {"escaped": {"count": 1, "reason": "1 of 2 window(s): ..."}}}
    for seq, rec in enumerate([clean, flagged, None], 2):
        writer.write({"seq": seq, "t": 1.0, "type": "region_released", "gpu": 0, "region": seq, "kind": "region",
                      "reason": "released", "integrity": rec})
    assert integrity_findings(tmp_path / "trace.jsonl") == {
        "regions": 2, "flagged": 1, "windows": 5, "flags": {"escaped": 1}}


def test_submissions_come_in_rounds_each_every_candidate_once_in_the_seeds_order() -> None:
    opts = runner.Options(sim=True, scale=0.5, repeats=3, seed=7)
    first = [c.key for c in runner.commands(opts)]
    order = runner.submissions(opts)
    assert len(order) == 3 * len(first)
    rounds = [[c.key for c, r in order if r == n] for n in range(3)]
    assert [r for _, r in order] == sorted(r for _, r in order)  # round 0, then 1, then 2
    assert rounds[0] == first and all(sorted(r) == sorted(first) for r in rounds)
    assert rounds[1] != rounds[0]  # reshuffled: a candidate's repeats meet other neighbours
    assert runner.submissions(opts) == order  # the same order for every setup
    assert [c.key for c, _ in runner.submissions(runner.Options(sim=True, scale=0.5, seed=7))] == first
    assert runner.command_label(order[0][0], 2, 3) == f"{order[0][0].key}#2"
    assert runner.command_label(order[0][0], 0, 1) == order[0][0].key


