"""One benchmark command: `python -m krex_bench.candidate PROBLEM CANDIDATE`.

Shaped like a kernel agent's command: import torch and triton, build the
candidate (its Triton kernel compiles on first launch), check it against a
reference on fresh random inputs, then time it inside `region()`: warm-up,
an L2 flush before every repeat, CUDA events around each launch, the median
of the repeats (with `--watch-clock-ms`, the SM clock, throttle reasons,
power and temperature sampled while they run: clock_watch.py). The repeats are shared among PLACEMENTS builds of the
candidate, each with its own buffers, since where the buffers land moves a
small kernel's time by up to 4.5%. Prints one JSON line with the median, the SM clock read
at the start of the timed repeats and at their end (the report matches
measurements by the end's clock: the one the last repeats ran at) and the
time each phase took.

Every command compiles its kernels from scratch (a fresh TRITON_CACHE_DIR
unless the caller gave one), as an agent's new candidates do.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the heavy imports: they are part of the command

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

L2_FLUSH_BYTES = 256 << 20  # several times the H200's 50 MB L2
WARMUP_S = 0.05  # long enough for an idle GPU's clocks to come up
# A small kernel's time depends on where its buffers landed: on the H200 one
# build times within 0.5% of itself, two builds up to 4.5% apart
# (docs/BENCHMARKS.md, "Where a small kernel's levels come from"). One build's
# median is one draw of that; the median over several builds is the kernel's.
PLACEMENTS = 4
LONG_KERNEL_MS = 5.0  # a kernel this long feels a power cap the others left (docs/BENCHMARKS.md, runs 4-7)


def nvml_device() -> tuple[Any, Any] | None:
    """pynvml and the handle of this command's GPU; None where NVML cannot say.
    Opened before the region, so that the reads inside it cost microseconds,
    not NVML's start-up."""
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = os.environ.get("KREX_GPU_UUID")
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None


def clock_reader(device: tuple[Any, Any] | None) -> Callable[[], int | None]:
    """A reader of the SM clock of `device` (nvml_device()'s; None where NVML cannot say)."""
    if device is None:
        return lambda: None
    nvml, handle = device

    def read() -> int | None:
        try:
            return int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        except Exception:
            return None

    return read


def phases(started: float, imported: float, built: float, checked: float, entered: float, timed: float) -> dict[str, float]:
    """Where a command's time went, from the moments each step ended (the report's phase shares)."""
    return {
        "import": imported - started,
        "build_compile": built - imported,
        "check": checked - built,
        "region_wait": entered - checked,
        "timing": timed - entered,
    }


def placement_shares(repeats: int, placements: int) -> list[slice]:
    """The repeats each placement times: consecutive, as even as they divide."""
    return [slice(i * repeats // placements, (i + 1) * repeats // placements) for i in range(placements)]


def time_launches(run: Callable[[], object], flush: Any, starts: list[Any], ends: list[Any]) -> list[float]:
    """One timed launch per pair of events, each after an L2 flush; the
    launches' times in ms. Also what benchmarks/small_kernel_levels.py times
    with, so its levels are this command's."""
    import torch

    for start, end in zip(starts, ends, strict=True):
        flush.zero_()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m krex_bench.candidate", description=__doc__)
    p.add_argument("problem")
    p.add_argument("candidate")
    p.add_argument("--repeats", type=int, default=0, help="timed repeats (default: the problem's)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--watch-clock-ms", type=int, default=0,
                   help="sample the SM clock, throttle reasons, power and temperature this often while the repeats "
                   "run (0: off)")
    p.add_argument("--placements", type=int, default=PLACEMENTS,
                   help="builds the repeats are shared among, each with its own buffers (default %(default)s)")
    p.add_argument("--settle-long-s", type=float, default=0.0,
                   help=f"a kernel of at least {LONG_KERNEL_MS:g} ms asks its region to settle up to this long")
    args = p.parse_args(argv)

    own_cache = "TRITON_CACHE_DIR" not in os.environ
    if own_cache:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="krex-bench-triton-")
    try:
        return measure(args)
    finally:
        if own_cache:
            shutil.rmtree(os.environ.pop("TRITON_CACHE_DIR"), ignore_errors=True)


def measure(args: argparse.Namespace) -> int:
    import torch
    import triton  # noqa: F401 (imported as every candidate does, kernel or not)

    from krex_bench import clock_watch, kernels, workload

    imported = time.time()
    cand = workload.candidate(args.problem, args.candidate)
    repeats = args.repeats or workload.BY_NAME[args.problem].repeats
    if not 0 <= args.watch_clock_ms <= 1000:
        raise SystemExit(f"--watch-clock-ms must be between 0 (off) and 1000, got {args.watch_clock_ms}")
    if not 1 <= args.placements <= repeats:
        raise SystemExit(f"--placements must be between 1 and the repeats ({repeats}), got {args.placements}")
    if args.seed is not None:
        torch.manual_seed(args.seed)
    first = kernels.build(cand)
    first.run()  # the first launch compiles
    # The other placements: built while the earlier ones stay alive, so their
    # buffers land elsewhere in GPU memory.
    builds = [first] + [kernels.build(cand) for _ in range(args.placements - 1)]
    torch.cuda.synchronize()
    device = nvml_device()  # part of the set-up, not of the region's wait
    sm_clock_mhz = clock_reader(device)
    watched = clock_watch.nvml_reader(*device) if device and args.watch_clock_ms > 0 else None
    compiled = time.time()

    errors = []
    for built in builds:
        built.poison()
        errors.append(kernels.relative_error(built.run(), built.reference))
    torch.cuda.synchronize()
    checked = time.time()
    # The worst build's error; a NaN (a zero reference) fails, as max() would hide it.
    error = next((e for e in errors if not e <= first.tolerance), max(errors))
    result: dict[str, object] = {"problem": cand.problem, "candidate": cand.name, "rel_error": error}
    if not error <= first.tolerance:
        result.update(ok=False, reason=f"relative error {error:.3g} over the tolerance {first.tolerance:g}")
        print(json.dumps(result), flush=True)
        return 1
    runs = [b.run for b in builds]  # the closures hold the inputs; the references go
    del builds, built, first

    timing = _timed_in_region(args, runs, repeats, sm_clock_mhz, watched)
    entered, timed = timing.pop("entered"), timing.pop("timed")
    result.update(timing, phases_s=phases(STARTED, imported, compiled, checked, entered, timed), started=STARTED,
                  ended=time.time())
    print(json.dumps(result), flush=True)
    return 0


def _settle_asked(args: argparse.Namespace, run: Callable[[], object], start: Any, end: Any) -> float | None:
    """How long the region asks to settle: --settle-long-s for a long kernel, else None."""
    import torch

    if args.settle_long_s <= 0:
        return None
    # One launch timed outside the region, under whatever the other tenants
    # run: an upper bound of the kernel's time, so no long kernel is missed.
    start.record()
    run()
    end.record()
    torch.cuda.synchronize()
    return float(args.settle_long_s) if start.elapsed_time(end) >= LONG_KERNEL_MS else None


def _timed_in_region(args: argparse.Namespace, runs: list[Callable[[], object]], repeats: int,
                     sm_clock_mhz: Callable[[], int | None], watched: Any) -> dict[str, Any]:
    """Warm up, then time every placement's share of the repeats inside one
    region: the result's figures, and when the region was entered and the
    timing ended."""
    import torch

    from krex_bench import clock_watch
    from krex_runtime.client import region

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    settle_s = _settle_asked(args, runs[0], starts[0], ends[0])
    with region(settle_s=settle_s) as held:
        entered = time.time()
        warm_until = time.monotonic() + WARMUP_S
        warm_runs = 0
        while warm_runs < 3 or time.monotonic() < warm_until:
            runs[0]()
            torch.cuda.synchronize()
            warm_runs += 1
        clock_start = sm_clock_mhz()
        per_placement = []
        # time_launches synchronizes: between two marks the GPU ran one
        # placement's launches and nothing else of this command's.
        marks = [time.monotonic()]
        with clock_watch.ClockWatch(watched, args.watch_clock_ms / 1000) as watch:
            for run, share in zip(runs, placement_shares(repeats, len(runs)), strict=True):
                run()  # untimed: the first touch of this placement's buffers
                per_placement.append(time_launches(run, flush, starts[share], ends[share]))
                marks.append(time.monotonic())
        clock = sm_clock_mhz()
    times = [t for chunk in per_placement for t in chunk]
    return {
        "settle_asked_s": settle_s,
        "ok": True,
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "repeats": repeats,
        "placements": len(runs),
        "placement_medians_ms": [statistics.median(chunk) for chunk in per_placement],
        "warm_runs": warm_runs,
        "sm_clock_mhz": clock,
        "sm_clock_start_mhz": clock_start,
        **watch.summary(),  # the lowest clock and the throttle reasons seen between the two reads
        "placement_watch": watch.windows(marks) if watched is not None else None,
        "region_flags": list(held.flags),  # at the grant, and at the release (exit:...)
        "entered": entered,
        "timed": time.time(),
    }


if __name__ == "__main__":
    sys.exit(main())
