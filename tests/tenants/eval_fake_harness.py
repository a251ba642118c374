"""A stand-in for the evaluation harness, for the client's tests: it takes
the harness's command line, and does what the candidate file's first line
asks (`# fake: WHAT`), on the simulated driver:

  correct     times the reference (1 ms kernels) and the candidate (100 us),
              each in its own region, `--trials` windows each; a good line
  no_region   the same times, taken outside any region (TIMES.region null)
  liar        as correct, but reports a candidate median four times too fast
  incorrect   a line with failure `incorrect`, nothing timed
  compile     a line with failure `compile_error` and a compiler's last lines
  malformed   a result line of the wrong shape (check.passed a string)
  not_json    a result line that is not JSON
  crash       writes a traceback to stderr and exits 3, no line
  hang        sleeps past any time limit

    eval_fake_harness.py [-m MODULE] --problem P --candidate C [--trials N] ...
"""

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

from krex_runtime.client import region
from krex_runtime.sim.simcuda import SimCuda
from krex_runtime.tenant.region import _channel

parser = argparse.ArgumentParser()
parser.add_argument("-m", dest="module")
for name in ("problem", "candidate", "dtype"):
    parser.add_argument(f"--{name}")
for name in ("inputs", "trials", "warmup", "seed"):
    parser.add_argument(f"--{name}", type=int)
for name in ("atol", "rtol"):
    parser.add_argument(f"--{name}", type=float)
args = parser.parse_args()
problem, candidate = Path(args.problem), Path(args.candidate)
first = candidate.read_text().splitlines()[0]
what = first.removeprefix("# fake:").strip()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def times(elapsed: list[float], region_id: int | None) -> dict:
    ordered = sorted(elapsed)
    return {"region": region_id, "trials": len(elapsed), "median_ms": statistics.median(elapsed),
            "min_ms": ordered[0], "p10_ms": ordered[len(ordered) // 10], "p90_ms": ordered[(9 * len(ordered)) // 10],
            "mean_ms": statistics.fmean(elapsed), "std_ms": statistics.pstdev(elapsed), "stream": "0"}


def timed(cuda: SimCuda, kernel_ns: int, in_region: bool) -> tuple[list[float], int | None]:
    starts = [cuda.event() for _ in range(args.trials)]
    ends = [cuda.event() for _ in range(args.trials)]

    def trials() -> list[float]:
        for start, end in zip(starts, ends):
            cuda.record(start)
            cuda.launch(kernel_ns, name="timed")
            cuda.record(end)
            cuda.event_synchronize(end)
        return [cuda.elapsed_ms(s, e) for s, e in zip(starts, ends)]

    if not in_region:
        return trials(), None
    with region():
        region_id = _channel.region_seq
        return trials(), region_id


line = {"schema": 1, "problem": problem.name, "candidate": candidate.name, "problem_sha256": sha(problem),
        "candidate_sha256": sha(candidate), "compiled": True, "correct": True, "failure": None,
        "check": {"input_sets": args.inputs, "passed": args.inputs, "atol": args.atol, "rtol": args.rtol,
                  "dtype": args.dtype, "max_abs_error": 1e-6, "max_rel_error": 1e-6, "failed_set": None},
        "fresh_check": {"passed": True, "max_abs_error": 1e-6, "max_rel_error": 1e-6, "message": "fresh inputs agree"},
        "timing": None, "phases_s": {"load": 0.01, "compile_wait": 0.0, "compile": 0.02, "check": 0.01, "timed": 0.1},
        "harness_patched": []}

if what in ("correct", "no_region", "liar"):
    cuda = SimCuda()
    reference = times(*timed(cuda, 1_000_000, what != "no_region"))
    candidate_times = times(*timed(cuda, 100_000, what != "no_region"))
    if what == "liar":
        candidate_times["median_ms"] /= 4
    line["timing"] = {"reference": reference, "candidate": candidate_times}
elif what == "incorrect":
    line.update(correct=False, fresh_check=None, failure={
        "class": "incorrect", "message": "input set 2: max abs error 0.5 over atol 0.01", "detail": ""})
    line["check"].update(passed=2, failed_set=2, max_abs_error=0.5)
elif what == "compile":
    line.update(compiled=False, correct=None, check=None, fresh_check=None, failure={
        "class": "compile_error", "message": "load_inline failed: error: expected ';'",
        "detail": "kernel.cu(3): error: expected a \";\"\n1 error detected"})
elif what == "malformed":
    line["check"]["passed"] = "all of them"
elif what == "not_json":
    print("KREX-EVAL-RESULT {not json")
    sys.exit(0)
elif what == "crash":
    print("Traceback (most recent call last):\n  File \"candidate.py\", line 1\nRuntimeError: boom", file=sys.stderr)
    sys.exit(3)
elif what == "hang":
    time.sleep(3600)
print("KREX-EVAL-RESULT " + json.dumps(line, separators=(",", ":")))
