"""krex bench's figures from results already measured (no runtime): the
ranking, inflation, spread and steadiness figures, their bootstrap
intervals, and what the report says of them."""

from __future__ import annotations

import math

import pytest
from runtime_helpers import bench_result

from krex_bench import analysis, ranking


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


def test_inflation_read_apart_by_what_paced_the_timed_windows() -> None:
    """Ten 1-10 ms candidates: the krex run's first four measured with most
    windows host-paced (the GPU waited on the host's launches) and 3% slow,
    the six issued ahead at native's time; one measurement's region sent no
    count. The split shows the host's share as the gap between the two."""
    native = [bench_result("mm", f"c{i}", 2.0, 1980) for i in range(10)]
    krex = [bench_result("mm", f"c{i}", 2.0 * (1.03 if i < 4 else 1.0), 1980) for i in range(10)]
    for i, r in enumerate(krex):
        r.update(host_paced=(9 if i < 4 else 1), timed_windows=10)
    del krex[9]["host_paced"]
    data = {"runs": [_run("native", native), _run("krex c4", krex)]}
    row = {r["label"]: r for r in analysis.summarize(data, resamples=50)["rows"]}["krex c4"]
    assert row["host_paced"] == {"n": 4, "known": 9, "of": 10}
    assert row["inflation_host_paced"]["1-10 ms"]["p50"] == pytest.approx(0.03)
    assert row["inflation_issued_ahead"]["1-10 ms"]["p50"] == pytest.approx(0.0)
    assert analysis.host_paced({"host_paced": 5, "timed_windows": 10}) is True
    assert analysis.host_paced({"host_paced": 0, "timed_windows": 0}) is None

    from krex_bench import report

    header = {"date": "d", "simulated": False, "machine": {}, "workload": [], "scale": 1, "argv": ["krex"]}
    text = report.markdown({**header, **data}, analysis.summarize(data, resamples=50))
    assert "By what paced the timed windows" in text and "krex c4 4/9" in text


def _run(label: str, results: list[dict], **more: object) -> dict:
    kind = label.split()[0]
    return {"setup": {"kind": kind, "label": label, "concurrency": 4}, "results": results, "failures": [], **more}


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
