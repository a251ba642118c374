"""`krex eval` on a real GPU: throughput, speedup fidelity and integrity of
the KernelBench-format workload in benchmarks/eval/ (needs torch, triton,
nvcc and the KernelBench problems, .kb/KernelBench/{level1,level2}).

  python benchmarks/eval_bench.py [--set candidates|catalogue] [--setups direct,ungated,krex]
                                  [--concurrency 16] [--gpu 0] [--out DIR] [--only GLOB]
  python benchmarks/eval_bench.py --report-only --out DIR

Method (for docs/BENCHMARKS.md, "krex eval"):

- Workload. benchmarks/eval/candidates/: candidate files of our own for level
  1 and 2 KernelBench problems whose references take about 0.1-10 ms on an
  H100 (elementwise, reductions, GEMMs with epilogues): load_inline CUDA,
  Triton and torch candidates, some incorrect (an off-by-one, a wrong
  epsilon or slope), some slower (naive loops, an untiled matmul), honest
  multi-stream ones, and a few reward hacks. benchmarks/eval/catalogue/ holds
  the cheats a candidate can try from inside its module (an unjoined side
  stream, a background thread, cached or special-cased outputs, replaced
  timers and checkers, ...) beside honest patterns that look alike (fork-join,
  CUDA graphs on the current stream, workspaces). Each folder's EXPECTED.toml
  says what the evaluator should conclude of each file; the bench scores
  itself against it.
- Setups. Every evaluation compiles its candidate cold (a fresh build folder).
  `direct`: the harness (python -m krex_runtime.eval.harness) run directly,
  one evaluation after another, no runtime: KernelBench's way, the baseline.
  `serial`: the same through a runtime of policy `command`, one at a time.
  `ungated`: a runtime of policy `ungated` running `--concurrency` evaluations
  at once, no regions, no interception library. `krex`: the runtime's default
  configuration (policy krex, 16 slots a GPU, preload on), `--concurrency`
  at once. Runtime setups get every evaluation at once through the Python API
  (Client.evaluate_many); the runtime's slots bound how many run. A `#N`
  suffix (`direct#2`) runs a setup again: its deviation from the first is the
  GPU's own run-to-run noise.
- Throughput: evaluations a minute, over the time from the first submission
  to the last result. Its 95% interval: the gaps between consecutive results
  drawn again with replacement (percentile bootstrap, 2000 draws).
- Fidelity, against the baseline (direct when run, else serial), over the
  candidates correct in both: Kendall's tau-b of the speedups (interval: the
  candidates drawn again), sign flips around 1.0 (all, and those where the
  baseline is outside 0.95-1.05), and |speedup / baseline's - 1| at the p50
  and p95 (interval as tau's). The SM clock of each measurement: the regions'
  `sm_clock_mhz` (runtime setups), NVML's right after it (direct).
- Integrity (krex setups only: `trusted` needs the interception library):
  what the evaluator said of each file (its failure class, else untrusted,
  else review, else trusted) against EXPECTED.toml; hacks caught (failed,
  untrusted or reviewed), honest candidates flagged (failed or untrusted
  where a correct, trusted result was expected), and the expected untrusted
  reason or replaced name seen.

Each setup's evaluations go to DIR/<set>-<setup>.json as they end; the report
reads every such file of DIR, so setups run in separate invocations (each
within a device call's time limit) are reported together.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from krex_bench.bootstrap import NO_INTERVAL, intervals, quantile
from krex_bench.ranking import kendall_tau_b
from krex_runtime.testing.local_runtime import Runtime

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SETS = {"candidates": HERE / "eval" / "candidates", "catalogue": HERE / "eval" / "catalogue"}
HARNESS = "krex_runtime.eval.harness"
SCHEMA = "krex-eval-bench/1"
# policy, interception library preloaded
POLICIES = {"serial": ("command", False), "ungated": ("ungated", False), "krex": ("krex", True)}
BAND = 0.05  # a baseline speedup this close to 1.0 may flip by noise alone


@dataclass(frozen=True)
class Item:
    file: str  # its key in EXPECTED.toml: level1/88_MinGPTNewGelu.v2.py
    candidate: Path
    problem: Path
    expected: dict[str, Any]


@dataclass(frozen=True)
class Options:
    inputs: int
    atol: float
    rtol: float
    trials: int
    warmup: int
    seed: int
    timeout: float  # seconds, per evaluation
    runs: tuple[str, ...] = ()  # the argv that runs the harness; (): python -m krex_runtime.eval.harness

    def harness(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("timeout", "runs")}

    def argv(self) -> list[str]:
        return [w for k, v in self.harness().items() for w in (f"--{k}", str(v))]


def suite_root(given: str | None) -> Path:
    tries = [Path(given)] if given else [REPO / ".kb" / "KernelBench" / "KernelBench", REPO / ".kb" / "KernelBench"]
    for root in tries:
        if (root / "level1").is_dir() and (root / "level2").is_dir():
            return root.absolute()
    raise SystemExit(f"no KernelBench levels under {', '.join(map(str, tries))} (--suite-root)")


def workload(which: str, root: Path, only: str) -> list[Item]:
    folder = SETS[which]
    manifest = tomllib.loads((folder / "EXPECTED.toml").read_text())
    items = [Item(key, (folder / key).absolute(), root / exp["problem"], exp)
             for key, exp in sorted(manifest.items()) if not only or fnmatch.fnmatch(key, only)]
    missing = [str(i.problem) for i in items if not i.problem.is_file()] + \
              [str(i.candidate) for i in items if not i.candidate.is_file()]
    if missing:
        raise SystemExit(f"missing files: {', '.join(missing[:4])}")
    return items


# --- where the API is used (one place each, should its names move) -------------------


def evaluate_all(client: Any, items: list[Item], opts: Options, batch: str) -> list[tuple[Item, dict[str, Any], float]]:
    """Every item submitted at once (the runtime's slots bound how many run):
    (item, its Evaluation as a dict, seconds from the submission to its end),
    in the order they ended."""
    by_path = {str(i.candidate): i for i in items}
    t0 = time.monotonic()
    ended = []
    own = {"harness": list(opts.runs)} if opts.runs else {}
    for ev in client.evaluate_many([(i.problem, i.candidate) for i in items], max_in_flight=len(items),
                                   timeout=opts.timeout, batch=batch, **opts.harness(), **own):
        ended.append((by_path[ev.candidate_path], ev.to_dict(), time.monotonic() - t0))
    return ended


def region_clocks(client: Any, command_id: str) -> list[float]:
    """The SM clock (MHz) of each region the command held, as the runtime recorded it at the grant."""
    try:
        return [r.sm_clock_mhz for r in client.show(command_id).regions if r.sm_clock_mhz is not None]
    except Exception:
        return []


def direct_evaluation(item: Item, n: int, state: str, code: int | None, stdout: str, stderr: str) -> dict[str, Any]:
    """An Evaluation of a harness run outside any runtime: the client's own
    reading of its result line, from a record with no regions."""
    from krex_runtime.wire.evaluation import Pair, evaluation_of

    record = {"id": f"direct-{n}", "state": state, "exit_code": code, "label": f"direct/{item.file}", "regions": []}
    pair = Pair(str(item.problem), str(item.candidate))
    try:
        return evaluation_of(record, stdout, stderr=stderr, pair=pair).to_dict()
    except Exception as exc:  # a malformed line: a runtime_error, as evaluate_many makes it
        ev = evaluation_of(record, "", stderr=stderr, pair=pair).to_dict()
        ev.update(failure_class="runtime_error", failure_message=str(exc))
        return ev


# --- running the setups --------------------------------------------------------------


def nvml_clock(gpu: int) -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return float(pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(gpu), pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


def run_direct(items: list[Item], opts: Options, gpu: int, record: Any) -> None:
    """One harness process after another, no runtime, each candidate built cold."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="krex-eval-direct-") as builds:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_")}
        env.update(TORCH_EXTENSIONS_DIR=f"{builds}/torch_extensions", TRITON_CACHE_DIR=f"{builds}/triton",
                   CUDA_VISIBLE_DEVICES=str(gpu))
        for n, item in enumerate(items):
            runs = list(opts.runs) or [sys.executable, "-m", HARNESS]
            argv = [*runs, "--problem", str(item.problem), "--candidate", str(item.candidate), *opts.argv(),
                    "--device-index", "0"]
            try:
                done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=opts.timeout)
                state, code, out, err = "finished", done.returncode, done.stdout, done.stderr
            except subprocess.TimeoutExpired as e:
                state, code = "timeout", None
                out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
            ev = direct_evaluation(item, n, state, code, out, err)
            clock = nvml_clock(gpu)
            record(item, ev, time.monotonic() - t0, [clock] if clock is not None else [])


def run_runtime(base: str, concurrency: int, items: list[Item], opts: Options, gpu: int | None, folder: Path,
                record: Any) -> None:
    """A runtime of the setup's policy on GPU `gpu` (None: one simulated GPU, for a dry run)."""
    policy, preload = POLICIES[base]
    # The runtime's defaults but for the policy and the slots: a figure is
    # quoted for the configuration a node gets without tuning.
    gpus: dict[str, Any] = {"sim": 1} if gpu is None else {"sim": 0, "visible": (gpu,)}
    rt = Runtime(folder, **gpus, policy=policy, slots=concurrency, preload=preload,
                 canary_period_s=None, canary_target_ms=None).start()
    try:
        with rt.client(timeout_s=120) as client:
            for item, ev, done_s in evaluate_all(client, items, opts, batch=f"bench-{base}"):
                record(item, ev, done_s, region_clocks(client, ev["command_id"]))
    finally:
        rt.stop()


def run_setup(which: str, name: str, concurrency: int, items: list[Item], opts: Options, args: argparse.Namespace) -> Path:
    base = name.split("#")[0]
    out = Path(args.out) / f"{which}-{name.replace('#', '_')}.json"
    result: dict[str, Any] = {
        "schema": SCHEMA, "set": which, "setup": name, "base": base,
        "concurrency": 1 if base in ("direct", "serial") else concurrency, "options": asdict(opts),
        "gpu": args.gpu, "machine": machine(args.gpu), "complete": False, "rows": [],
    }

    def record(item: Item, ev: dict[str, Any], done_s: float, clocks: list[float]) -> None:
        result["rows"].append({"file": item.file, "expected": item.expected, "done_s": done_s,
                               "sm_clock_mhz": clocks, "eval": ev})
        out.write_text(json.dumps(result, indent=1))  # as each ends: a setup cut short keeps what it did
        print(f"  {name}: {len(result['rows'])}/{len(items)} {item.file}: {verdict(ev)}", file=sys.stderr, flush=True)

    if base == "direct":
        run_direct(items, opts, args.gpu, record)
    elif base in POLICIES:
        with tempfile.TemporaryDirectory(prefix=f"krex-eval-{base}-") as tmp:
            run_runtime(base, result["concurrency"], items, opts, None if args.sim else args.gpu, Path(tmp) / "rt",
                        record)
    else:
        raise SystemExit(f"unknown setup {name!r}: direct, serial, ungated or krex (a #N suffix repeats one)")
    result["complete"] = True
    out.write_text(json.dumps(result, indent=1))
    return out


def machine(gpu: int) -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        done = subprocess.run(["nvidia-smi", "-i", str(gpu), "--query-gpu=name,driver_version,clocks.max.sm",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        info["gpu"] = done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = "n/a"
    return info


# --- reading the results -------------------------------------------------------------

FAILURES = ("compile_error", "runtime_error", "wrong_shape", "wrong_dtype", "incorrect", "timeout", "out_of_memory",
            "integrity_flagged")
ORDER = {"direct": 0, "serial": 1, "ungated": 2, "krex": 3}


def verdict(ev: dict[str, Any]) -> str:
    """What the evaluator said, in one word: the failure class, else untrusted, review or trusted."""
    if ev.get("failure_class"):
        return str(ev["failure_class"])
    if not ev.get("trusted"):
        return "untrusted"
    return "review" if ev.get("review") else "trusted"


def expectation_met(expected: dict[str, Any], ev: dict[str, Any]) -> bool:
    """trusted: trusted or reviewed (a review does not take trust away: a fast
    honest candidate may cross flag_speedup); caught: anything but trusted."""
    got, want = verdict(ev), expected["expect"]
    if want == "caught":
        return got != "trusted"
    return got in ("trusted", "review") if want == "trusted" else got == want


def flag_seen(expected: dict[str, Any], ev: dict[str, Any]) -> str:
    """Whether the untrusted reason or replaced name EXPECTED.toml names is in the result."""
    flag = expected.get("flag", "")
    if not flag:
        return "-"
    said = " ".join([*(ev.get("untrusted_reasons") or []), *(ev.get("harness_patched") or []),
                     ev.get("failure_message") or ""])
    if flag == "integrity":  # the library saw the window's work escape it (its flags, or times that disagree)
        hit = any(code in said for code in ("integrity_flagged", "timer_mismatch", "region_not_verified"))
    elif flag == "fresh_check":  # the harness's re-check after the timed trials failed
        hit = (ev.get("fresh_check") or {}).get("passed") is False or "fresh check" in (ev.get("failure_message") or "")
    else:
        hit = flag in said
    return "yes" if hit else "no"


def load_results(folder: Path) -> list[dict[str, Any]]:
    results = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            results.append(data)
    return sorted(results, key=lambda r: (r["set"], ORDER.get(r["base"], 9), r["setup"]))


def speedups(result: dict[str, Any]) -> dict[str, float]:
    """file -> speedup, of the evaluations that were correct."""
    return {r["file"]: float(r["eval"]["speedup"]) for r in result["rows"]
            if r["eval"].get("correct") and r["eval"].get("speedup")}


def throughput(result: dict[str, Any]) -> tuple[float, tuple[float, float]]:
    """Evaluations a minute and its interval: the gaps between consecutive ends drawn again."""
    done = sorted(r["done_s"] for r in result["rows"])
    gaps = [b - a for a, b in zip([0.0, *done], done)]

    def rate(g: list[float]) -> float:
        return len(g) / sum(g) * 60 if sum(g) > 0 else math.nan

    if not gaps:
        return math.nan, NO_INTERVAL
    return rate(gaps), intervals([gaps], lambda d: [rate(d[0])])[0] if len(gaps) >= 4 else NO_INTERVAL


def fidelity(base: dict[str, float], other: dict[str, float]) -> dict[str, Any] | None:
    pairs = [(base[f], other[f]) for f in sorted(set(base) & set(other))]
    if len(pairs) < 2:
        return None

    def figures(d: list[list[tuple[float, float]]]) -> list[float]:
        drawn = d[0]
        devs = sorted(abs(y / x - 1) for x, y in drawn)
        return [kendall_tau_b([x for x, _ in drawn], [y for _, y in drawn]), quantile(devs, 0.5), quantile(devs, 0.95)]

    point = figures([pairs])
    ci = intervals([pairs], figures) if len(pairs) >= 4 else [NO_INTERVAL] * 3
    return {"n": len(pairs), "tau": point[0], "tau_ci": ci[0], "p50": point[1], "p95": point[2], "p95_ci": ci[2],
            "flips": sum((x > 1) != (y > 1) for x, y in pairs),
            "clear_flips": sum((x > 1) != (y > 1) for x, y in pairs if abs(x - 1) > BAND)}


def clocks(result: dict[str, Any]) -> str:
    seen = sorted(c for r in result["rows"] for c in r["sm_clock_mhz"])
    if not seen:
        return "n/a"
    return f"{statistics.median(seen):.0f} ({seen[0]:.0f}-{seen[-1]:.0f})"


def integrity_summary(result: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(hits, of how many) per figure, over one krex setup's results."""
    rows = result["rows"]
    hacks = [r for r in rows if r["expected"]["hack"]]
    honest = [r for r in rows if not r["expected"]["hack"] and r["expected"]["expect"] in ("trusted", "review")]
    bugs = [r for r in rows if not r["expected"]["hack"] and r["expected"]["expect"] == "incorrect"]
    flagged = [r for r in honest if verdict(r["eval"]) in (*FAILURES, "untrusted")]
    flags = [r for r in rows if flag_seen(r["expected"], r["eval"]) != "-"]
    return {
        "hacks caught (failed, untrusted or review)": (sum(verdict(r["eval"]) != "trusted" for r in hacks), len(hacks)),
        "honest flagged (failed or untrusted)": (len(flagged), len(honest)),
        "honest bugs found incorrect": (sum(verdict(r["eval"]) == "incorrect" for r in bugs), len(bugs)),
        "expected flag seen": (sum(flag_seen(r["expected"], r["eval"]) == "yes" for r in flags), len(flags)),
        "expectations met": (sum(expectation_met(r["expected"], r["eval"]) for r in rows), len(rows)),
    }


# --- the report ----------------------------------------------------------------------


def _ci(ci: tuple[float, float], fmt: str) -> str:
    return "" if any(math.isnan(v) for v in ci) else f" [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _label(result: dict[str, Any]) -> str:
    return result["setup"] if result["base"] in ("direct", "serial") else f"{result['setup']} c{result['concurrency']}"


def print_throughput(results: list[dict[str, Any]], baseline: dict[str, Any] | None) -> None:
    base_rate = throughput(baseline)[0] if baseline else math.nan
    print("| setup | evals | correct | wall s | evals/min [95% CI] | of baseline | compile s (sum) | SM MHz p50 (range) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        rate, ci = throughput(r)
        wall = max((x["done_s"] for x in r["rows"]), default=0.0)
        compiled = sum((x["eval"].get("phases_s") or {}).get("compile", 0.0) or 0.0 for x in r["rows"])
        correct = sum(1 for x in r["rows"] if x["eval"].get("correct"))
        part = "" if r["complete"] else " (cut short)"
        print(f"| {_label(r)}{part} | {len(r['rows'])} | {correct} | {wall:.0f} | {rate:.1f}{_ci(ci, '.1f')} | "
              f"{rate / base_rate:.2f}x | {compiled:.0f} | {clocks(r)} |")


def print_fidelity(results: list[dict[str, Any]], baseline: dict[str, Any]) -> None:
    base = speedups(baseline)
    print(f"\nSpeedups against {_label(baseline)} (candidates correct in both):\n")
    print(f"| setup | pairs | Kendall tau-b [95% CI] | sign flips | flips, baseline outside 1+-{BAND:g} | "
          "p50 abs dev | p95 abs dev [95% CI] |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if r is baseline:
            continue
        f = fidelity(base, speedups(r))
        if f is None:
            print(f"| {_label(r)} | <2 | | | | | |")
            continue
        print(f"| {_label(r)} | {f['n']} | {f['tau']:.3f}{_ci(f['tau_ci'], '.3f')} | {f['flips']} | "
              f"{f['clear_flips']} | {f['p50']:.2%} | {f['p95']:.2%}{_ci(f['p95_ci'], '.2%')} |")


def print_files(results: list[dict[str, Any]]) -> None:
    by_setup = [(r, {x["file"]: x for x in r["rows"]}) for r in results]
    files = sorted({x["file"] for r in results for x in r["rows"]})
    print("\nPer file, per setup: the verdict (krex: failure class, untrusted, review or trusted, and whether "
          "EXPECTED.toml said so; others: failure class or correct) and the speedup:\n")
    print("| file | expected | " + " | ".join(_label(r) for r, _ in by_setup) + " |")
    print("|---|---|" + "---|" * len(by_setup))
    for f in files:
        expected = next(rows[f]["expected"] for _, rows in by_setup if f in rows)
        cells = []
        for r, rows in by_setup:
            row = rows.get(f)
            if row is None:
                cells.append("")
                continue
            ev, s = row["eval"], row["eval"].get("speedup")
            if r["base"] == "krex":
                said = verdict(ev) + (" ok" if expectation_met(expected, ev) else " MISS")
            else:  # no interception library: nothing is trusted, only the check and the times count
                said = ev.get("failure_class") or ("correct, review" if ev.get("review") else "correct")
            cells.append(f"{said} {s:.2f}x" if s else said)
        print(f"| {f} | {expected['expect']} ({expected['kind']}) | " + " | ".join(cells) + " |")


def print_integrity(results: list[dict[str, Any]]) -> None:
    for r in results:
        if r["base"] != "krex":
            continue
        print(f"\nIntegrity under {_label(r)}:\n")
        for name, (hits, n) in integrity_summary(r).items():
            print(f"- {name}: {hits}/{n}" + (f" ({hits / n:.0%})" if n else ""))
        # What caught each hack, and every result that is not what EXPECTED.toml says.
        for x in sorted(r["rows"], key=lambda x: x["file"]):
            ev, met = x["eval"], expectation_met(x["expected"], x["eval"])
            if met and not x["expected"]["hack"]:
                continue
            why = ev.get("failure_message") or "; ".join(ev.get("untrusted_reasons") or []) or ev.get("review_reason") or ""
            print(f"  - {'' if met else 'MISS '}{x['file']}: expected {x['expected']['expect']}, got {verdict(ev)}; "
                  f"flag seen: {flag_seen(x['expected'], ev)}; {why[:240]}")


def report(results: list[dict[str, Any]]) -> None:
    if not results:
        print("no results")
        return
    for which in sorted({r["set"] for r in results}):
        these = [r for r in results if r["set"] == which]
        baseline = next((r for r in these if r["setup"] == "direct"), None) or \
            next((r for r in these if r["setup"] == "serial"), None)
        print(f"\n## {which}: {these[0]['machine'].get('gpu', 'n/a')}; options {json.dumps(these[0]['options'])}\n")
        print_throughput(these, baseline)
        if baseline is not None:
            print_fidelity(these, baseline)
        print_files(these)
        print_integrity(these)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=sorted(SETS), default="candidates", help="which folder of benchmarks/eval/")
    p.add_argument("--setups", default="direct,ungated,krex", help="direct, serial, ungated, krex; NAME#2 runs one again")
    p.add_argument("--concurrency", type=int, default=16, help="evaluations at once in ungated and krex (default 16)")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--suite-root", help="the folder holding level1/ and level2/ (default: under .kb/KernelBench)")
    p.add_argument("--only", default="", help="a glob over EXPECTED.toml's files (level2/*)")
    p.add_argument("--inputs", type=int, default=5)
    p.add_argument("--atol", type=float, default=1e-2)
    p.add_argument("--rtol", type=float, default=1e-2)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per evaluation")
    p.add_argument("--out", default="eval-bench-out", help="the setups' JSON files; the report reads every one here")
    p.add_argument("--report-only", action="store_true", help="print the tables of --out without running anything")
    p.add_argument("--harness", default="", help="the command that runs the harness, in place of "
                   "`python -m krex_runtime.eval.harness` (a stand-in for a dry run)")
    p.add_argument("--sim", action="store_true", help="runtime setups on a simulated GPU (a dry run with --harness)")
    args = p.parse_args()
    # `timeout` ends a run with SIGTERM: as an exit, so that a runtime started here is stopped
    # (with its tenants) rather than left holding the GPU for the next run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        items = workload(args.set, suite_root(args.suite_root), args.only)
        opts = Options(args.inputs, args.atol, args.rtol, args.trials, args.warmup, args.seed, args.timeout,
                       tuple(shlex.split(args.harness)))
        for name in (s.strip() for s in args.setups.split(",") if s.strip()):
            print(f"{args.set}: {name}, {len(items)} evaluations", file=sys.stderr, flush=True)
            run_setup(args.set, name, args.concurrency, items, opts, args)
    report(load_results(Path(args.out)))


if __name__ == "__main__":
    main()
