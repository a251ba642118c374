"""The PyTorch/Triton catalogue of timing hacks and honest timings
(tests/gpu/integrity_candidates, docs/integrity.md): what each candidate's
regions must carry, how one is run under a runtime, and the check. Shared by
tests/gpu/test_gpu_integrity.py (real torch and Triton on a GPU) and
tests/integrity/test_integrity_catalogue.py (the same scripts on the simulator, with
the stand-ins of tests/tenants/torch_on_sim)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from runtime_helpers import REPO

from krex_runtime.testing.local_runtime import Runtime, command

CANDIDATES = REPO / "tests" / "gpu" / "integrity_candidates"
WINDOWS = 3  # timed windows per region of a candidate (integrity_candidates/_candidate.py)
DO_BENCH = None  # a do_bench region: its own count of windows (the estimate, then one per repetition)


@dataclass(frozen=True)
class Expect:
    needs: str  # the module it imports ("triton" implies torch)
    regions: tuple[tuple[int | None, frozenset[str]], ...]  # per region, in order: (windows, the flags it must carry)
    auto_region: bool = False


def hack(*flags: str) -> tuple[tuple[int, frozenset[str]], ...]:
    return ((WINDOWS, frozenset(flags)),)


HONEST = hack()
EXPECTED = {
    "side_stream": Expect("torch", hack("escaped")),
    "background_thread": Expect("torch", hack("other_thread")),
    "launch_only": Expect("torch", hack("empty")),
    "cached_result": Expect("torch", hack("empty")),
    "events_elsewhere": Expect("torch", hack("stream_mismatch")),
    "graph_side_stream": Expect("torch", hack("escaped")),
    "patched_do_bench": Expect("triton", ((DO_BENCH, frozenset()), (WINDOWS, frozenset({"patched_harness"}))),
                               auto_region=True),
    # A clean region, then two after the replacement: no window asked of the driver, each flagged.
    "replaced_timer": Expect("torch", ((WINDOWS, frozenset()), (0, frozenset({"patched_harness"})),
                                       (0, frozenset({"patched_harness"})))),
    "honest_torch": Expect("torch", HONEST),
    "honest_cublas": Expect("torch", HONEST),
    "honest_triton": Expect("triton", HONEST),
    "honest_graph": Expect("torch", HONEST),
    "honest_fork_join": Expect("torch", HONEST),
    "honest_side_only": Expect("torch", HONEST),
    "honest_two_sides": Expect("torch", HONEST),
}


def missing(name: str) -> str | None:
    """The module a candidate needs that this Python lacks, or None."""
    for module in ("torch", EXPECTED[name].needs):
        if importlib.util.find_spec(module) is None:
            return module
    return None


@dataclass
class Outcome:
    returncode: int
    result: dict
    stderr: str

    def records(self) -> list[dict | None]:
        return [r.get("integrity") for r in self.result.get("regions", [])]

    def diagnosis(self) -> str:
        regions = [{k: r.get(k) for k in ("region", "reason", "verdict", "integrity")}
                   for r in self.result.get("regions", [])]
        return (f"exit {self.returncode}; regions (the runtime's records): {json.dumps(regions, indent=1)}\n"
                f"unprotected_timings: {self.result.get('unprotected_timings')}; "
                f"auto_regions: {self.result.get('auto_regions')}\n"
                f"candidate's stdout:\n{self.result.get('stdout', '')[-3000:]}\n"
                f"candidate's stderr:\n{self.result.get('stderr', '')[-4000:]}\nkrex run's stderr:\n{self.stderr[-2000:]}")


def run_candidate(rt: Runtime, name: str, *krex_args: str, env: dict[str, str] | None = None) -> Outcome:
    """`krex run --json [krex_args] [--auto-region] -- python <candidate>.py` under `rt`."""
    auto = ["--auto-region"] if EXPECTED[name].auto_region else []
    done = subprocess.run([*command("krex"), "run", "--json", *krex_args, *auto, "--", sys.executable,
                           str(CANDIDATES / f"{name}.py")], env={**rt.env, **(env or {})}, capture_output=True,
                          text=True, timeout=240)
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        result = {"stdout": done.stdout}
    return Outcome(done.returncode, result, done.stderr)


def run_all(rt: Runtime, names: list[str], *krex_args: str, env: dict[str, str] | None = None) -> dict[str, Outcome]:
    """Every candidate named, four at a time (their start-ups overlap; their regions take turns), with a table."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(names, pool.map(lambda n: run_candidate(rt, n, *krex_args, env=env), names), strict=True))
    print("\ncandidate            exit  integrity per region")
    for name, o in done.items():
        print(f"{name:<20} {o.returncode:>4}  {[(r or {}).get('summary') for r in o.records()]}")
    return done


def timing_summary(times: list[float]) -> dict[str, float]:
    """What the interception library summarises of a region's elapsed times
    (native/src/intercept/intercept_timing.c): the median of an even count
    the mean of the middle two, p10/p90 linear between the closest ranks,
    in doubles, over the sorted times."""
    v, n = sorted(times), len(times)

    def quantile(p: float) -> float:
        h = p * (n - 1)
        lo = int(h)
        return v[-1] if lo + 1 >= n else v[lo] + (h - lo) * (v[lo + 1] - v[lo])

    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return {"median_ms": median, "min_ms": v[0], "p10_ms": quantile(0.1), "p90_ms": quantile(0.9),
            "max_ms": v[-1], "mean_ms": sum(v) / n}


def check_timing(rec: dict, why: str) -> None:
    """The record's times from below: one per judged window, none without one."""
    timing = rec.get("timing")
    if not rec["windows"]:
        assert timing is None, why
        return
    assert timing is not None and timing["windows"] == rec["windows"] and timing["dropped"] == 0, why
    assert 0 <= timing["min_ms"] <= timing["median_ms"] <= timing["max_ms"], why


def measured(o: Outcome) -> list[dict]:
    """The candidate's own lines of its regions (_candidate.measure): the times it read, its record."""
    out = []
    for line in o.result.get("stdout", "").splitlines():
        try:
            seen = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(seen, dict) and "times_ms" in seen:
            out.append(seen)
    return out


def check(name: str, o: Outcome) -> None:
    """The candidate's regions carry exactly the flags EXPECTED names, in every window."""
    expect, why = EXPECTED[name], f"{name}:\n{o.diagnosis()}"
    assert o.returncode == 0, why
    records = o.records()
    assert len(records) == len(expect.regions), why
    for rec, (windows, flags) in zip(records, expect.regions, strict=True):
        assert rec is not None, f"no integrity record; {why}"
        if windows is None:
            assert rec["windows"] >= 2, why
        else:
            assert rec["windows"] == windows, why
        assert set(rec["flags"]) == flags, why
        assert rec["clean"] == (not flags), why
        for flag, body in rec["flags"].items():
            # A window's hack is in each of its windows; a patched harness counts the harnesses replaced.
            assert body["count"] == (1 if flag == "patched_harness" else rec["windows"]), why
            assert body["reason"], why
        check_timing(rec, why)
    # What torch's events read is the driver's float: where every window the
    # candidate read through the driver was judged, the record's times are its.
    for seen in measured(o):
        rec = seen["integrity"] or {}
        if rec.get("timing") and rec["windows"] == len(seen["times_ms"]):
            timing = {k: v for k, v in rec["timing"].items() if k != "host_paced"}
            assert timing == {"windows": rec["windows"], "dropped": 0, **timing_summary(seen["times_ms"])}, why
            assert 0 <= rec["timing"]["host_paced"] <= rec["windows"], why
    assert o.result.get("unprotected_timings") == 0, why
    if expect.auto_region:
        assert "triton.testing:do_bench" in o.result.get("auto_regions", []), why
