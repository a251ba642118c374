"""One command of a suite in KernelBench's format: build one problem file's
model and inputs as the suite does, check that its forward runs, then time
the forward inside `region()` with a CUDA-event timer like the suite's own
(`time_execution_with_cuda_event`): warm-up launches each followed by a
synchronisation, then per trial a synchronisation, an L2 flush, an event
pair around one forward and a synchronisation; the first trial discarded.
Prints one JSON line as krex_bench/candidate.py does, so the report reads
both workloads alike.

    python -m krex_bench.suite_candidate FILE [--trials N] [--warmup N] [--seed N]

Outside a KREX runtime `region()` does nothing: the native runs time the
same code alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from krex_bench import trial_probe

STARTED = time.time()
L2_FLUSH_INT64 = 32 * 1024 * 1024  # 256 MiB, as the suite's clear_l2_cache: over an H200's L2


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"krex_suite_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def to_cuda(value: Any) -> Any:
    import torch

    return value.cuda() if isinstance(value, torch.Tensor) else value


def time_with_cuda_events(
    fn: Callable[[], object], warmup: int, trials: int, discard_first: int = 1, rows: list[list[Any]] | None = None
) -> list[float]:
    """The suite's CUDA-event timer, in ms per trial. With `rows`, each kept
    trial's timing thread readings too (trial_probe.py), read outside the
    event pair."""
    import torch

    for _ in range(warmup):
        fn()
        torch.cuda.synchronize()
    torch.cuda.empty_cache()
    times = []
    for trial in range(trials + discard_first):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush = torch.empty(L2_FLUSH_INT64, dtype=torch.int64, device="cuda")
        flush.fill_(42)
        del flush
        before = trial_probe.read() if rows is not None else None
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if trial >= discard_first:
            times.append(start.elapsed_time(end))
            if before is not None and rows is not None:
                rows.append(trial_probe.trial(before, trial_probe.read(), times[-1]))
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m krex_bench.suite_candidate", description=__doc__)
    p.add_argument("file", type=Path)
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--trial-detail", action="store_true",
                   help="add each trial's time and timing-thread readings (krex_bench/trial_probe.py)")
    args = p.parse_args(argv)

    import torch

    from krex_bench.candidate import clock_reader, nvml_device, phases
    from krex_runtime.client import region

    imported = time.time()
    result: dict[str, Any] = {"problem": args.file.resolve().parent.name, "candidate": args.file.stem}
    torch.manual_seed(args.seed)
    module = load(args.file)
    with torch.no_grad():
        model = module.Model(*[to_cuda(v) for v in module.get_init_inputs()]).cuda().eval()
        inputs = [to_cuda(v) for v in module.get_inputs()]
        torch.cuda.synchronize()
        built = time.time()
        out = model(*inputs)  # the check: it runs and gives finite numbers
        torch.cuda.synchronize()
        finite = all(bool(torch.isfinite(t).all()) for t in (out if isinstance(out, (tuple, list)) else [out])
                     if isinstance(t, torch.Tensor))
        checked = time.time()
        if not finite:
            print(json.dumps(result | {"ok": False, "reason": "the forward gave non-finite values"}), flush=True)
            return 1
        del out
        sm_clock_mhz = clock_reader(nvml_device())
        with region() as held:
            entered = time.time()
            clock_start = sm_clock_mhz()
            rows: list[list[Any]] | None = [] if args.trial_detail else None
            times = time_with_cuda_events(lambda: model(*inputs), args.warmup, args.trials, rows=rows)
            clock = sm_clock_mhz()
    timed = time.time()
    result.update(
        ok=True,
        median_ms=statistics.median(times),
        min_ms=min(times),
        repeats=len(times),
        sm_clock_mhz=clock,
        sm_clock_start_mhz=clock_start,
        region_flags=list(held.flags),
        # The runtime's record of the region's timed windows: how many the host paced
        # (docs/integrity.md, "Times from below"), to read inflation against.
        host_paced=((held.integrity or {}).get("timing") or {}).get("host_paced"),
        timed_windows=((held.integrity or {}).get("timing") or {}).get("windows"),
        phases_s=phases(STARTED, imported, built, checked, entered, timed),
        started=STARTED,
        ended=time.time(),
    )
    if rows is not None:
        result["trials"] = rows
        result["trial_fields"] = list(trial_probe.TRIAL_FIELDS)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
