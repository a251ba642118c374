"""`krex bench`'s arguments: the parser of its three subcommands and the
checks of the values argparse cannot make (ranges, GPU sets, the native runs
`--merge` must bring)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from krex_bench import analysis, setups

FAILED = 125  # the krex exit status of every KREX failure (README, "Exit status of krex")
MAX_REPEATS = 100
CLOCK_HELP = (
    "a measurement is clock-matched when its SM clock is within this fraction of the native measurement's "
    f"(default {analysis.CLOCK_MATCH:g})"
)


# The runtime settings each krex variant runs once per value of: (flag,
# default, help); `seconds` reads their comma-separated values.
PER_VALUE_SECONDS = (
    ("--settle-s", "",
     "comma-separated values of regions.settle_max_s (how long an entry may wait for the power state the "
     "drained tenants left to clear); each krex variant runs once per value (default: once, with the runtime's "
     "default)"),
    ("--settle-long-s", "0",
     "comma-separated; krex setups: candidates whose kernel takes at least 5 ms ask their own region to "
     "settle up to this long (region(settle_s=...); at most the runtime's regions.settle_cap_s, 1 s); each krex "
     "variant runs once per value (default 0: none asks, the runtime settles where the grant shows a power state, "
     "regions.settle_max_s; 0,0.5: both)"),
    ("--gap-s", "",
     "comma-separated values of regions.gap_s; each krex variant runs once per value "
     "(default: once, with the runtime's default)"),
)


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors exiting 125 like every krex failure (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(FAILED, f"{self.prog}: error: {message}\n")


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog="krex bench", description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    js = Parser(add_help=False)
    js.add_argument("--json", action="store_true", help="one JSON document on stdout (progress on stderr)")
    run = sub.add_parser("run", parents=[js], help="run the workload under every setup, then write the report")
    for add in (_add_where, _add_workload, _add_setups, _add_measuring):
        add(run)
    rep = sub.add_parser("report", parents=[js], help="write the report (markdown, JSON, PNG) for results.json files")
    rep.add_argument("results", type=Path, nargs="+", help="results.json; several are merged, a later file's run of a setup replacing an earlier one's (one native run needed)")
    rep.add_argument("--out", type=Path, default=None, help="folder (default: beside the first results file)")
    rep.add_argument("--clock-tolerance", type=float, default=analysis.CLOCK_MATCH, help=CLOCK_HELP)
    listing = sub.add_parser("list", parents=[js], help="list the problems, their candidates and the krex variants")
    listing.add_argument("--markdown", action="store_true", help="the candidates' native times and buckets, as a table")
    return p


def _add_where(run: argparse.ArgumentParser) -> None:
    """Which GPUs the setups run on, real or simulated."""
    run.add_argument("--gpu", type=int, default=None, help="GPU index to run on (default 0)")
    run.add_argument(
        "--gpus", metavar="N|I,J", default=None,
        help="run each command on a set of GPUs, as `krex run --gpus` does: N of them or these indices (0,1); "
        "its regions cover the whole set. Process mode only: the krex variants in process mode "
        "(`all`: those), native in process mode; with --sim, that many simulated GPUs",
    )  # fmt: skip
    run.add_argument("--sim", action="store_true",
                     help="simulated GPUs (one, or those --gpus names) and simulated candidates (no torch)")


def _add_workload(run: argparse.ArgumentParser) -> None:
    """What each setup runs: the problems, their candidates and how often."""
    run.add_argument("--scale", type=float, default=1.0, help="share of each problem's candidates, in (0, 1]")
    run.add_argument(
        "--suite", type=Path, default=None,
        help="a folder of problems in KernelBench's format (a Model, get_inputs and get_init_inputs per file; your own "
        "checkout, e.g. KernelBench/level1) to run instead of the built-in workload (krex_bench/suite.py)",
    )  # fmt: skip
    run.add_argument("--suite-problems", default="", help="comma-separated stems or their leading numbers (default: all)")
    run.add_argument("--suite-trials", type=int, default=30, help="timed trials per suite command (default 30)")
    run.add_argument("--trial-detail", action="store_true",
                     help="suite commands record every trial and its timing thread's readings (benchmarks/slow_trials.py reads them)")
    run.add_argument(
        "--repeats", type=int, default=1,
        help="measurements of each candidate per setup (default 1); submitted in interleaved rounds, the same order "
        "for every setup; the figures take each candidate's median of its measurements' medians",
    )  # fmt: skip
    run.add_argument("--problems", default="", help="comma-separated problems (default: all; see `krex bench list`)")
    run.add_argument("--concurrency", default="4,8,16", help="comma-separated concurrencies (default 4,8,16)")


def _add_setups(run: argparse.ArgumentParser) -> None:
    """Which setups run: the krex variants and the runtime settings each runs once per value of."""
    run.add_argument(
        "--variants",
        default="all",
        help="krex variants BACKEND/MODE/PROTECTION, comma-separated, or `all` or `none` (default all)",
    )
    run.add_argument(
        "--native", choices=tuple(setups.NATIVE_RUNS), default="2",
        help="2: native and its repeat (default); native: native only; repeat: the repeat only, native merged "
        "from --merge; 0: neither, merged from --merge results that have both",
    )  # fmt: skip
    run.add_argument(
        "--native-mode", choices=("process", "pooled"), default="process",
        help="how native runs each command, one at a time with the GPU alone: process (a fresh process each, as a "
        "user runs it alone; default) or pooled (in a warm process that imported torch once: the same timer and "
        "kernels without the start-up, for a native run in a fifth of the time)",
    )  # fmt: skip
    run.add_argument("--no-ungated", action="store_true", help="skip the ungated setups")
    run.add_argument("--merge", type=Path, help="add these results' runs (e.g. an earlier native run) to this one; a setup run again here replaces its earlier run")
    run.add_argument(
        "--budget-s", type=float, default=0.0, help="start no setup after this many seconds (native and its repeat always run)"
    )
    run.add_argument("--canary-too", action="store_true",
                     help="each krex variant runs once more with telemetry.canary on (off by default)")
    for flag, default, text in PER_VALUE_SECONDS:
        run.add_argument(flag, default=default, help=text)

def _add_measuring(run: argparse.ArgumentParser) -> None:
    """How the measurements are judged and where they and the runtimes' folders go."""
    run.add_argument("--clock-tolerance", type=float, default=analysis.CLOCK_MATCH, help=CLOCK_HELP)
    run.add_argument(
        "--watch-clock-ms", type=int, default=0,
        help="every command (native too) samples the SM clock, throttle reasons, power and temperature this often "
        "while its repeats run; its result says the lowest clock, the reasons seen, the highest power and the "
        "temperature's range (krex_bench/clock_watch.py; default 0: off)",
    )  # fmt: skip
    run.add_argument("--seed", type=int, default=1, help="submission order")
    run.add_argument("--out", type=Path, default=Path("bench-results"), help="folder for results.json and the report")
    run.add_argument("--work-dir", type=Path, default=Path("/tmp/krex-bench"), help="runtimes' folders")
    run.add_argument("--keep", action="store_true", help="keep each setup's run folder (traces, output)")


def tolerance(value: float) -> float:
    if not 0 < value < 1:
        raise ValueError(f"--clock-tolerance must be in (0, 1), got {value:g}")
    return value


def seconds(text: str, flag: str) -> tuple[float, ...]:
    """A comma-separated list of seconds, each within [0, 1] (one setup per value)."""
    values = tuple(float(v) for v in text.split(",") if v)
    if any(not 0 <= v <= 1 for v in values):
        raise ValueError(f"{flag} values must be within [0, 1] seconds, got {text}")
    return values


def gpu_set(text: str | None, gpu: int | None) -> tuple[tuple[int, ...], int]:
    """--gpus N (how many) or --gpus I,J (which), as `krex run --gpus` takes
    it: (indices, count); ((), 0) without it."""
    if text is None:
        return (), 0
    if gpu is not None:
        raise ValueError("give --gpu (one GPU) or --gpus (a set), not both")
    words = [w.strip() for w in text.split(",")]
    if not all(w.isascii() and w.isdigit() for w in words):
        raise ValueError(f"--gpus takes a number of GPUs (2) or GPU indices (0,1), not {text!r}")
    if len(words) == 1:
        if int(words[0]) < 1:
            raise ValueError(f"--gpus takes at least 1 GPU, not {text!r}")
        return (), int(words[0])
    indices = tuple(int(w) for w in words)
    if len(set(indices)) != len(indices):
        raise ValueError(f"--gpus names a GPU twice: {text}")
    return tuple(sorted(indices)), len(indices)


def on_a_set(variants: tuple[str, ...], every: bool, native_mode: str) -> tuple[str, ...]:
    """The krex variants a command on a set of GPUs runs in: process mode only
    (a zygote or a context process is one GPU's). `all` takes those; one named
    in another mode is refused, and so is native in pooled mode."""
    if native_mode != "process":
        raise ValueError(f"--gpus runs native in process mode, not --native-mode {native_mode} "
                         "(a context process is one GPU's)")
    if every:
        return tuple(v for v in variants if setups.parse_variant(v)[1] == "process")
    other = [v for v in variants if setups.parse_variant(v)[1] != "process"]
    if other:
        raise ValueError(f"--gpus runs each command on a set of GPUs, in process mode only: not {', '.join(other)} "
                         "(a zygote or a context process is one GPU's)")
    return variants


def has_native_runs(native: str, merge: Path | None) -> None:
    """The native runs this invocation does not measure must come from --merge
    (the native one at least: everything is compared with it)."""
    needed = [k for k in ("native", "native-repeat") if k not in setups.NATIVE_RUNS[native]]
    if native == "native" or not needed:
        return
    if merge is None:
        raise ValueError(f"--native {native} needs --merge RESULTS.json with the {' and '.join(needed)} run")
    try:
        labels = {r["setup"]["label"] for r in json.loads(merge.read_text())["runs"] if "results" in r}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--merge {merge}: cannot read its runs ({exc})") from None
    missing = [label for label in needed if label not in labels]
    if missing:
        raise ValueError(f"--native {native}: {merge} has no {' and no '.join(missing)} run to merge")
