"""The evaluation (`krex bench`): its statistics, and a whole run on a simulated GPU."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from runtime_helpers import bench_result

from krex_bench import analysis, ranking, runner, setups, workload
from krex_runtime.testing.local_runtime import command


def test_kendall_tau_b_matches_hand_counts() -> None:
    assert ranking.kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert ranking.kendall_tau_b([1, 2, 3, 4], [40, 30, 20, 10]) == -1.0
    # one swapped pair of six: (5 - 1) / 6
    assert ranking.kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # a tie in y: 5 concordant, 0 discordant, 1 tie in y: 5 / sqrt(6 * 5)
    assert ranking.kendall_tau_b([1, 2, 3, 4], [1, 2, 2, 4]) == pytest.approx(5 / math.sqrt(30))
    assert math.isnan(ranking.kendall_tau_b([1, 1], [2, 2]))


def test_flips_are_grouped_by_the_native_gap() -> None:
    native = {"p/a": 1.00, "p/b": 1.01, "p/c": 1.30, "q/a": 5.0, "q/b": 5.2}
    run = {"p/a": 1.02, "p/b": 1.01, "p/c": 1.31, "q/a": 5.3, "q/b": 5.2}
    ranked = ranking.ranking(run, native)
    out = ranked["flips"]
    assert out["<2%"] | {"ci": None} == {"pairs": 1, "flips": 1, "rate": 1.0, "ci": None}  # a/b, 1% apart, reordered
    assert out["2-5%"] | {"ci": None} == {"pairs": 1, "flips": 1, "rate": 1.0, "ci": None}  # q: 4% apart, reordered
    assert out[">=10%"]["pairs"] == 2 and out[">=10%"]["flips"] == 0
    assert out["5-10%"]["pairs"] == 0 and math.isnan(out["5-10%"]["rate"])
    assert ranked["tau_b"]["p"]["tau"] == pytest.approx(ranking.kendall_tau_b([1.0, 1.01, 1.3], [1.02, 1.01, 1.31]))


def test_inflation_buckets_by_native_time_and_ignores_missing_candidates() -> None:
    native = {"m/a": 20.0, "m/b": 2.0, "s/a": 0.5, "g/a": 0.02, "g/b": 0.03}
    run = {"m/a": 22.0, "m/b": 2.0, "s/a": 0.55, "g/a": 0.021}
    out = analysis.inflation(run, native)
    assert out[">10 ms"]["n"] == 1 and out[">10 ms"]["p50"] == pytest.approx(0.1)
    assert math.isnan(out[">10 ms"]["p95"])  # one candidate: no p95 is quoted
    assert out["1-10 ms"]["p50"] == 0.0
    assert out["0.1-1 ms"]["max"] == pytest.approx(0.1)
    assert out["<0.1 ms"]["n"] == 1  # g/b never finished in the run


def test_percentile_interpolates_like_numpy() -> None:
    assert analysis.percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert analysis.percentile([1, 2, 3, 4], 0.95) == pytest.approx(3.85)
    assert math.isnan(analysis.percentile([], 0.5))


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
    # The pooled run says whether its commands retired their context processes (here none did).
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


def test_flips_over_the_repeat_is_the_worst_group_excess() -> None:
    def groups(**rates: tuple[int, int]) -> dict[str, dict[str, float]]:
        out = {name: {"pairs": 0, "flips": 0, "rate": math.nan} for name, _, _ in ranking.GAP_GROUPS}
        for name, (pairs, flipped) in rates.items():
            key = {"small": "<2%", "mid": "2-5%", "big": ">=10%"}[name]
            out[key] = {"pairs": pairs, "flips": flipped, "rate": flipped / pairs}
        return out

    run = groups(small=(4, 2), mid=(2, 0), big=(10, 1))
    repeat = groups(small=(4, 1), mid=(2, 0))
    assert ranking.flips_over(run, repeat) == pytest.approx(25.0)  # <2%: 50% against 25%; >=10% has no repeat pairs
    assert math.isnan(ranking.flips_over(run, groups()))


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



def test_clock_matched_inflation_leaves_out_measurements_at_another_clock() -> None:
    """A synthetic results file: ten 1-10 ms candidates, native at 1500 MHz. The
    krex run measured four of them at 1410 MHz, 8% slower (power state), and
    the six others at native's clock, 0.5% slower. Raw, the p95 is the power
    state's; clock-matched (within 2%), only the six at 1500 MHz count, and
    six are too few to quote a p95."""
    native = [bench_result("mm", f"c{i}", 2.0, 1500) for i in range(10)]
    repeat = [bench_result("mm", f"c{i}", 2.0, 1500) for i in range(10)]
    krex = [bench_result("mm", f"c{i}", 2.0 * 1.08, 1410) for i in range(4)]
    krex[0]["region_flags"] = ["exit:clock:1410MHz-below-top-1980MHz"]  # the region's own word on its clock
    krex += [bench_result("mm", f"c{i}", 2.0 * 1.005, 1500 if i % 2 else 1515) for i in range(4, 10)]
    setup = {"kind": "krex", "concurrency": 4, "gate_backend": "preload", "mode": "process", "protection": "gpu+cpu"}
    data = {
        "runs": [
            {"setup": {"kind": "native", "label": "native", "concurrency": 1}, "results": native, "failures": []},
            {"setup": {"kind": "native-repeat", "label": "native-repeat", "concurrency": 1}, "results": repeat,
             "failures": []},
            {"setup": {**setup, "label": "krex c4"}, "results": krex, "failures": []},
        ]
    }  # fmt: skip
    rows = {r["label"]: r for r in analysis.summarize(data)["rows"]}
    raw, matched = rows["krex c4"]["inflation"]["1-10 ms"], rows["krex c4"]["inflation_matched"]["1-10 ms"]
    assert raw["n"] == 10 and raw["p50"] == pytest.approx(0.005) and raw["p95"] == pytest.approx(0.08)
    assert matched["n"] == 6 and matched["p50"] == pytest.approx(0.005) and math.isnan(matched["p95"])
    assert rows["krex c4"]["clock_matched"] == {"n": 6, "of": 10}
    assert rows["krex c4"]["off_clock"] == 1
    assert rows["native-repeat"]["inflation_matched"]["1-10 ms"]["p95"] == pytest.approx(0.0)
    # A tighter tolerance leaves out the three at 1515 MHz (1% off) too.
    tight = {r["label"]: r for r in analysis.summarize(data, clock_tolerance=0.005)["rows"]}
    assert tight["krex c4"]["clock_matched"] == {"n": 3, "of": 10}
    # A measurement without a clock is never matched.
    assert not analysis.clock_within(None, 1500, 0.02) and not analysis.clock_within(1500, None, 0.02)

    from krex_bench import report

    header = {"date": "d", "simulated": False, "machine": {}, "workload": [], "scale": 1, "argv": ["krex"]}
    text = report.markdown({**header, **data}, analysis.summarize(data))
    # p50, p90, p95 with their intervals; the max as it is; against the repeat's intervals
    raw = "| 1-10 ms | krex c4 | 10 | +0.50% [+0.50, +8.00] | +8.00% [+1.25, +8.00] | +8.00% [+4.62, +8.00] | +8.00% |"
    assert raw + " **no** / **no** / **no** |" in text
    assert "| 1-10 ms | krex c4 | 6 | +0.50% [+0.50, +0.50] | n<8 | n<8 | +0.50% | **no** / n/a / n/a |" in text  # matched
    assert "| 1-10 ms | native-repeat | 10 | +0.00% [+0.00, +0.00] |" in text and "| (the floor) |" in text
    assert "within 2% of the clock" in text and "krex c4 6/10 (1)" in text


def test_granted_unthrottled_leaves_out_regions_granted_under_a_power_cap() -> None:
    """Ten >10 ms candidates; two of the krex run's regions were granted under
    sw_power_cap (left by the drained tenants) and measured 1% slow, at
    native's clock; the rest +0.02%. Raw and clock-matched, the p95 is the
    cap's; granted unthrottled, the eight others show what is left."""
    native = [bench_result("fp32", f"c{i}", 20.0, 1980) for i in range(10)]
    krex = [bench_result("fp32", f"c{i}", 20.0 * (1.01 if i < 2 else 1.0002), 1980) for i in range(10)]
    for r in krex[:2]:
        r["region_flags"] = ["throttled:sw_power_cap"]
    krex[2]["region_flags"] = ["exit:throttled:sw_power_cap"]  # at the release only: the grant was clean
    setup = {"kind": "krex", "concurrency": 4, "gate_backend": "preload", "mode": "process", "protection": "gpu-only"}
    data = {"runs": [
        {"setup": {"kind": "native", "label": "native", "concurrency": 1}, "results": native, "failures": []},
        {"setup": {**setup, "label": "krex c4"}, "results": krex, "failures": []},
    ]}  # fmt: skip
    row = {r["label"]: r for r in analysis.summarize(data)["rows"]}["krex c4"]
    assert row["inflation_matched"][">10 ms"]["p95"] == pytest.approx(0.01, abs=1e-4)
    assert row["unthrottled"] == {"n": 8, "of": 10}
    assert row["inflation_unthrottled"][">10 ms"]["p95"] == pytest.approx(0.0002)

    from krex_bench import report

    header = {"date": "d", "simulated": False, "machine": {}, "workload": [], "scale": 1, "argv": ["krex"]}
    text = report.markdown({**header, **data}, analysis.summarize(data))
    assert "| >10 ms | krex c4 | 8 | +0.02% [+0.02, +0.02] | +0.02% [+0.02, +0.02] | +0.02% [+0.02, +0.02] | +0.02% | n/a" in text
    assert "Unthrottled at the grant: krex c4 8/10" in text


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


def test_a_report_of_runs_from_two_gpus_says_so() -> None:
    """Runs merged from another machine start carry another GPU's UUID: the
    report names which setup ran where, since two GPUs of one model differ by
    more than the noise floor. One GPU (or results without UUIDs): no line."""
    from krex_bench import report

    results = [bench_result("mm", f"c{i}", 2.0, 1500) for i in range(3)]

    def data(uuids: list[str | None]) -> dict:
        labels = ["native", "native-repeat", "krex c4"]
        runs = [{"setup": {"kind": label.split()[0], "label": label, "concurrency": 1}, "results": results,
                 "failures": [], **({"gpu_uuid": u} if u else {})} for label, u in zip(labels, uuids, strict=True)]
        return {"date": "d", "simulated": False, "machine": {}, "workload": [], "scale": 1, "argv": ["krex"],
                "runs": runs}

    two = data(["GPU-a", "GPU-a", "GPU-b"])
    text = report.markdown(two, analysis.summarize(two))
    assert "**Measured on more than one GPU**" in text
    assert "GPU-a: native, native-repeat; GPU-b: krex c4" in text
    for same in (data(["GPU-a"] * 3), data([None] * 3)):
        assert "more than one GPU" not in report.markdown(same, analysis.summarize(same))
    # A run from before UUIDs were recorded, merged with newer ones: it may be another GPU.
    old = data([None, None, "GPU-b"])
    assert "unknown GPU: native, native-repeat; GPU-b: krex c4" in report.markdown(old, analysis.summarize(old))


def test_unsteady_counts_long_kernels_whose_placements_disagree_and_the_watch_counts_power_states() -> None:
    """Three 2 ms candidates and one 0.02 ms one. In the krex run one 2 ms
    candidate's third placement ran 12% slow (unsteady), one ran within 0.5%,
    and the small kernel's placements differ by 4% (where its buffers landed:
    not counted, it is under 1 ms). The clock watch saw sw_power_cap in one
    measurement and applications_clocks in another (no power state)."""
    native = [bench_result("mm", f"c{i}", 2.0, 1980) for i in range(3)] + [bench_result("g", "s", 0.02, 1980)]
    krex = [dict(bench_result("mm", "c0", 2.05, 1980), placement_medians_ms=[2.0, 2.0, 2.24, 2.0],
                 throttle_seen=["sw_power_cap"]),
            dict(bench_result("mm", "c1", 2.0, 1980), placement_medians_ms=[2.0, 2.01, 2.0, 2.0], throttle_seen=[]),
            bench_result("mm", "c2", 2.0, 1980),  # from before placements: left out
            dict(bench_result("g", "s", 0.02, 1980), placement_medians_ms=[0.020, 0.0208, 0.020, 0.020],
                 throttle_seen=["applications_clocks"])]
    data = {"runs": [
        {"setup": {"kind": "native", "label": "native", "concurrency": 1}, "results": native, "failures": []},
        {"setup": {"kind": "krex", "label": "krex c4", "concurrency": 4}, "results": krex, "failures": []},
    ]}  # fmt: skip
    rows = {r["label"]: r for r in analysis.summarize(data)["rows"]}
    assert rows["krex c4"]["unsteady"] == {"n": 1, "of": 2, "keys": ["mm/c0"], "causes": {"unwatched": 1}}
    assert rows["krex c4"]["throttled_during"] == {"n": 1, "of": 3}
    assert rows["native"]["unsteady"]["of"] == 0 and rows["native"]["throttled_during"] is None
    from krex_bench import report

    header = {"date": "d", "simulated": False, "machine": {}, "workload": [], "scale": 1, "argv": ["krex"]}
    text = report.markdown({**header, **data}, analysis.summarize(data))
    assert "placements' medians lie more than 1% apart" in text and "krex c4 1/2" in text
    assert "A power-state throttle reason seen while the repeats ran (`--watch-clock-ms`): krex c4 1/3" in text


def _watched(clocks: list[int | None], reasons: list[list[str] | None]) -> list[dict]:
    return [{"clock_samples": 0 if c is None else 5, "sm_clock_min_mhz": c, "throttle_seen": r,
             "power_max_w": 600.0, "temp_max_c": 60} for c, r in zip(clocks, reasons, strict=True)]


def test_the_slow_placements_of_an_unsteady_measurement_are_told_apart_by_what_the_watch_saw() -> None:
    """Four 2 ms candidates whose third placement ran 10% slow: under
    sw_power_cap (power state); at 1800 MHz against the others' 1980 with no
    reason (lower clock); at 1980 with no reason (same clock: not power);
    with no sample in that placement (unwatched). applications_clocks in a
    fast placement is no power state."""
    from krex_bench import report

    slow = [2.0, 2.0, 2.2, 2.0]
    cases = {
        "power": _watched([1980, 1980, 1980, 1980], [[], [], ["sw_power_cap"], []]),
        "lower": _watched([1980, 1980, 1800, 1980], [[], [], [], []]),
        "same": _watched([1980, 1980, 1980, 1980], [["applications_clocks"], [], [], []]),
        "empty": _watched([1980, 1980, None, 1980], [[], [], None, []]),
    }
    native = [bench_result("mm", name, 2.0, 1980) for name in cases]
    krex = [dict(bench_result("mm", name, 2.05, 1980), placement_medians_ms=slow, placement_watch=watch)
            for name, watch in cases.items()]
    causes = [analysis.slow_cause(r) for r in krex]
    assert causes == ["power state", "lower clock", "same clock", "unwatched"]
    assert analysis.slow_cause(dict(krex[0], placement_watch=None)) == "unwatched"
    data = {"runs": [
        {"setup": {"kind": "native", "label": "native", "concurrency": 1}, "results": native, "failures": []},
        {"setup": {"kind": "krex", "label": "krex c4", "concurrency": 4}, "results": krex, "failures": []},
    ]}  # fmt: skip
    summary = analysis.summarize(data)
    row = {r["label"]: r for r in summary["rows"]}["krex c4"]
    assert row["unsteady"]["n"] == 4
    assert row["unsteady"]["causes"] == {"power state": 1, "lower clock": 1, "same clock": 1, "unwatched": 1}
    header = {"date": "d", "simulated": False, "machine": {}, "workload": [], "scale": 1, "argv": ["krex"]}
    text = report.markdown({**header, **data}, summary)
    assert "krex c4 4/4 (lower clock 1, power state 1, same clock 1, unwatched 1)" in text
    assert "What the clock watch saw over the slow placements" in text


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
    from krex_runtime.wire.trace import TraceWriter

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


def _run(label: str, results: list[dict], **more: object) -> dict:
    kind = label.split()[0]
    return {"setup": {"kind": kind, "label": label, "concurrency": 4}, "results": results, "failures": [], **more}


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


def test_repeats_count_as_commands_and_a_candidate_is_its_median_of_medians() -> None:
    """Three repeats each: the krex run's c0 was slow once (one neighbour's
    burst); its median of medians is not. Throughput counts all six commands."""
    native = [dict(bench_result("mm", f"c{i}", 2.0 + i, 1980), repeat=r) for i in range(2) for r in range(3)]
    krex = [dict(bench_result("mm", "c0", ms, 1980), repeat=r) for r, ms in enumerate((2.0, 2.5, 2.02))]
    krex += [dict(bench_result("mm", "c1", 3.0, 1410 if r == 0 else 1980), repeat=r) for r in range(3)]
    data = {"runs": [_run("native", native, wall_s=60.0), _run("krex c4", krex, wall_s=30.0)]}
    assert analysis.medians(krex) == {"mm/c0": 2.02, "mm/c1": 3.0}
    row = {r["label"]: r for r in analysis.summarize(data, resamples=50)["rows"]}["krex c4"]
    assert row["throughput_per_min"] == 12.0 and row["vs_native"] == 2.0
    assert row["inflation"]["1-10 ms"]["p50"] == pytest.approx(0.005)  # (0.01 + 0) / 2
    assert row["clock_matched"] == {"n": 5, "of": 6}  # the repeat at 1410 MHz is left out, not the candidate


def test_bootstrap_intervals_hold_the_estimate_and_are_the_same_every_time() -> None:
    from krex_bench import bootstrap

    rng = __import__("random").Random(5)
    values = [[rng.gauss(0.01, 0.02)] for _ in range(30)]
    figures = analysis.quantile_figures(values)
    assert figures["n"] == 30 and figures["max"] == max(v for (v,) in values)
    for name in ("p50", "p90", "p95"):
        lo, hi = figures["ci"][name]
        assert lo <= figures[name] <= hi and lo < hi, (name, figures)
    assert analysis.quantile_figures(values) == figures  # a fixed seed: a report made twice says the same
    assert analysis.quantile_figures(values[::-1])["ci"] != figures["ci"]  # the draws, not the answer, are fixed
    few = analysis.quantile_figures(values[:5])  # tails under MIN_P95_N: not quoted, no interval
    assert math.isnan(few["p95"]) and all(math.isnan(v) for v in few["ci"]["p95"]) and not math.isnan(few["ci"]["p50"][0])
    assert analysis.quantile_figures([])["n"] == 0
    # Clusters are drawn whole: a candidate whose measurements all agree gives a point interval.
    assert analysis.quantile_figures([[0.02, 0.02], [0.02], [0.02], [0.02]])["ci"]["p50"] == [0.02, 0.02]
    assert all(math.isnan(v) for v in analysis.quantile_figures([[0.01], [0.02], [0.03]])["ci"]["p50"])  # too few
    assert bootstrap.overlap((0, 1), (1, 2)) is True and bootstrap.overlap((0, 1), (1.5, 2)) is False
    assert bootstrap.overlap((0, 1), bootstrap.NO_INTERVAL) is None


def test_flip_rate_and_tau_intervals_hold_the_estimate_and_mark_the_repeat() -> None:
    """Ten candidates of one problem, 3% apart. The repeat orders them as
    native; the ungated run puts the slower half first. Its flip rate among
    pairs >=10% apart and its tau lie apart from the repeat's (all in order:
    point intervals); among neighbours (2-5%) one flip of nine is within
    what drawing the candidates again can give."""
    native = {f"p/c{i}": 1.0 * 1.03**i for i in range(10)}
    rotated = {f"p/c{i}": native[f"p/c{(i + 5) % 10}"] for i in range(10)}
    ranked = ranking.ranking(rotated, native)
    far, tau = ranked["flips"][">=10%"], ranked["tau_b"]["p"]
    assert (far["flips"], far["pairs"]) == (19, 21) and tau["tau"] == pytest.approx(-5 / 45)
    for figures, name in ((far, "rate"), (ranked["flips"]["2-5%"], "rate"), (tau, "tau")):
        lo, hi = figures["ci"][name]
        assert lo <= figures[name] <= hi and lo < hi, figures
    assert ranking.ranking(native, native)["tau_b"]["p"]["ci"]["tau"] == [1.0, 1.0]
    assert ranking.ranking(rotated, native) == ranked  # a fixed seed

    def results(times: dict[str, float]) -> list[dict]:
        return [bench_result(*key.split("/"), ms, 1980) for key, ms in times.items()]

    data = {"runs": [_run("native", results(native)), _run("native-repeat", results(native)),
                     _run("ungated c4", results(rotated))]}
    summary = analysis.summarize(data, resamples=200)
    ungated = {r["label"]: r for r in summary["rows"]}["ungated c4"]
    assert ungated["flips"][">=10%"]["overlaps_repeat"] == {"rate": False}
    assert ungated["flips"]["2-5%"]["overlaps_repeat"] == {"rate": True}
    assert ungated["tau_b"]["p"]["overlaps_repeat"] == {"tau": False}
    from krex_bench import report

    header = {"date": "d", "simulated": False, "machine": {}, "workload": [], "scale": 1, "argv": ["krex"]}
    text = report.markdown({**header, **data}, summary)
    line = next(li for li in text.splitlines() if li.startswith("| ungated c4 | n/a (0/0) |"))
    assert "| 90% [" in line and "(19/21)" in line and "| -0.11 [-0.3" in line and line.endswith("| gap >=10%, tau p |"), line


def test_the_spread_needs_no_native_and_the_bound_comes_from_native_regions() -> None:
    """The spread: median over the fastest repeat, per measurement, native's
    own included. The bound: native's regions took 0.5 s on average, so no
    setup whose timed regions run one after another passes 120 commands a minute."""
    def line(name: str, median: float, low: float, timing: float, repeat: int = 0) -> dict:
        return dict(bench_result("g", name, median, 1980), min_ms=low, repeat=repeat,
                    phases_s={"import": 1.0, "timing": timing})

    native = [line(f"c{i}", 0.05, 0.05 / (1 + 0.001 * i), 0.4 + 0.2 * (i % 2)) for i in range(10)]
    krex = [line(f"c{i}", 0.05, 0.05 / (1 + 0.01 * (i + r)), 0.5, r) for i in range(10) for r in range(2)]
    data = {"runs": [_run("native", native, wall_s=10.0), _run("krex c4", krex, wall_s=5.0)]}
    summary = analysis.summarize(data, resamples=100)
    assert summary["region_bound"] == {"n": 10, "mean_region_s": pytest.approx(0.5), "per_min": pytest.approx(120.0)}
    rows = {r["label"]: r for r in summary["rows"]}
    assert rows["native"]["vs_region_bound"] == pytest.approx(60 / 120)
    assert rows["krex c4"]["vs_region_bound"] == pytest.approx(240 / 120)  # overlapped regions: past the bound
    spread = rows["krex c4"]["spread"]
    assert spread["n"] == 20 and spread["max"] == pytest.approx(0.10)
    assert spread["p50"] == pytest.approx(0.05) and spread["ci"]["p50"][0] <= 0.05 <= spread["ci"]["p50"][1]
    assert rows["native"]["spread"]["p90"] == pytest.approx(0.0081)
    assert analysis.spread([bench_result("g", "old", 0.05, 1980)])["n"] == 0  # a line from before min_ms

    from krex_bench import report

    header = {"date": "d", "simulated": False, "machine": {}, "workload": ["g/c0"], "scale": 1, "argv": ["krex"]}
    text = report.markdown({**header, **data}, summary)
    assert "| native | 10 | +0.45% [" in text and "| krex c4 | 20 | +5.00% [" in text
    assert ("Region-serialisation bound: 120.0 cmds/min = 60 s / 0.500 s (the mean timed region of native's 10 "
            "measurements) x 1 GPU") in text and "Of it: native 50%, krex c4 200%." in text
    assert "| krex c4 | 20 | 0 | 5.0 | 240.0 | 400% | n/a | 200% |" in text
    bare = {"runs": [_run("native", [bench_result("g", "c0", 0.05, 1980)])]}
    assert "Region-serialisation bound: n/a" in report.markdown({**header, **bare}, analysis.summarize(bare, resamples=10))
